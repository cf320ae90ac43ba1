"""Scheduled reports: the ``report`` function on two EventBridge Scheduler schedules and the encrypted reports bucket.

The function runs the audit lake's named queries on Athena, reads the ledger, renders the CloudWatch chart, and
archives every report (HTML, JSON, CSVs, chart) under ``reports/`` in a KMS-encrypted, TLS-only bucket with access
logs; with ``reports.enforce`` it also sends the report to Slack and email.
"""

from __future__ import annotations

from typing import Unpack

from aws_cdk import Duration, Stack
from aws_cdk import aws_s3 as s3
from constructs import Construct

from governor.adapters import cost_explorer, instance_types
from governor.adapters import cur as cur_rates
from governor.registry import REGISTRY
from governor.report import archive, athena
from governor.report import chart_image as chart
from infra.constructs.dashboard import Dashboard
from infra.constructs.delivery import grant_delivery
from infra.constructs.function import CapabilityArgs, CapabilityConstruct, OperatorRead
from infra.constructs.shared import access_log_bucket, data_bucket

PREFIX = "reports"


class Reports(CapabilityConstruct):
    """The report function, its daily and weekly schedules, and the bucket that keeps every report."""

    CAPABILITY = REGISTRY["report"]
    TIMEOUT = Duration.minutes(10)
    MEMORY_MB = 1024

    def __init__(self, scope: Construct, construct_id: str, **args: Unpack[CapabilityArgs]) -> None:
        super().__init__(scope, construct_id, **args)
        # Built within the construct holding the fleet dashboard (registry: ``within``), which the report links to.
        dashboard = scope.node.try_find_child("Dashboard")
        if not isinstance(dashboard, Dashboard):
            raise TypeError(f"the reports link to the fleet dashboard: build them within its construct, not {scope}")
        dashboard_url = dashboard.url
        audit = args.get("audit")
        logs_bucket = getattr(audit, "access_logs", None)
        if logs_bucket is None:
            logs_bucket = access_log_bucket(
                self,
                "AccessLogs",
                "This bucket receives the reports bucket's server access logs; logging it would log the logs.",
                object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
                lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
            )
        self.bucket = data_bucket(
            self,
            "Bucket",
            key=self.shared.key,
            access_logs=logs_bucket,
            log_prefix="reports-bucket/",
            versioned=True,
            lifecycle_rules=[s3.LifecycleRule(noncurrent_version_expiration=Duration.days(30))],
        )
        why = "The reports archive is read whole: report keys carry dates."
        self.operator_reads.append(OperatorRead(self.bucket, why))  # gpu-admin and the auditor read every report
        # Known only once the bucket exists, after the function (CapabilityConstruct builds the function first).
        self.function.function.add_environment("REPORTS_BUCKET", self.bucket.bucket_name)
        self.function.function.add_environment("DASHBOARD_URL", dashboard_url)
        # GetObject: earlier reports' summary.json for the trend, and signing the Slack link to the archived HTML.
        self.function.add_statement(
            archive.IAM_ACTIONS,
            [self.bucket.arn_for_objects(f"{PREFIX}/*")],
            reason="Each report is written under reports/<kind>/<date>/ and read back from there (trend, signed "
            "link); the key is only known at run time. GetObject and PutObject only.",
        )
        self.function.add_unscoped_statement(
            "Chart",
            chart.IAM_ACTIONS,
            "GetMetricWidgetImage has no resource-level permissions; it only renders the fleet GPU utilisation "
            "chart from metrics the account already holds.",
        )
        self.function.add_unscoped_statement(
            "GpuFacts",
            instance_types.IAM_ACTIONS,
            "DescribeInstanceTypes has no resource-level permissions; the report reads the GPUs of the period's "
            "instance types (count, model, fractional share) to count GPU-hours and energy.",
        )
        if self.policy.pricing.effective_rates in ("cost_explorer", "cur"):
            self.function.add_unscoped_statement(
                "EffectiveRates",
                cost_explorer.IAM_ACTIONS,
                "GetCostAndUsage has no resource-level permissions; the report reads the account's amortised EC2 "
                "cost per instance type once a run, to price savings at what is actually paid.",
            )
        if audit is not None and hasattr(audit, "grant_query"):
            audit.grant_query(self.function, athena.IAM_ACTIONS, athena.DATA_ACTIONS)
        if self.policy.pricing.effective_rates == "cur":
            self._grant_cur(audit)
        for trigger_id in ("Daily", "Weekly"):
            self.on_schedule(trigger_id, payload={"kind": trigger_id.lower()})
        grant_delivery(self.function, self.policy)

    def _grant_cur(self, audit: object) -> None:
        """Read the CUR 2.0 table through the audit lake's workgroup: Glue on that one database and table, S3 list
        on its bucket and read under its prefix; nothing else of the billing bucket (Athena reads with our role)."""
        cur = self.policy.pricing.cur
        if cur is None:  # the policy refuses effective_rates: cur without it
            raise ValueError("pricing.cur: effective_rates is cur, so cur must name the table")
        if audit is None or not hasattr(audit, "grant_query"):
            raise ValueError(
                "pricing.effective_rates: cur runs its query in the audit lake's Athena workgroup, which this "
                "stack does not hold (the audit region's stack does)"
            )
        stack = Stack.of(self)
        self.function.add_statement(
            sorted(cur_rates.GLUE_ACTIONS),
            [
                stack.format_arn(service="glue", resource="catalog"),
                stack.format_arn(service="glue", resource="database", resource_name=cur.database),
                stack.format_arn(service="glue", resource="table", resource_name=f"{cur.database}/{cur.table}"),
            ],
        )
        bucket_arn = f"arn:{stack.partition}:s3:::{cur.bucket}"
        prefix = cur.prefix.rstrip("/")
        # s3:prefix is only in ListBucket's request context, so GetBucketLocation has its own statement.
        self.function.add_statement(["s3:GetBucketLocation"], [bucket_arn])
        self.function.add_statement(
            ["s3:ListBucket"], [bucket_arn], {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}} if prefix else None
        )
        self.function.add_statement(
            sorted(cur_rates.S3_OBJECT_ACTIONS),
            [f"{bucket_arn}/{prefix}/*" if prefix else f"{bucket_arn}/*"],
            reason="Athena reads every Parquet object of the CUR 2.0 export under its prefix with the caller's "
            "permissions; the object keys (billing period, chunk) are only known at query time. GetObject only.",
        )
