"""The audit lake: a multi-region CloudTrail trail into KMS-encrypted S3, a Glue table with partition projection
over account, region and day, an Athena workgroup with a bytes-scanned limit, and one named query per file of the
query library (``governor/audit/sql/*.sql``) for operators' console: the report runs the library shipped with its code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_athena as athena
from aws_cdk import aws_cloudtrail as cloudtrail
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from governor.audit.queries import console_form, list_queries
from governor.audit.schema import PARTITION_KEYS, REGIONS, TABLE_NAME, hive_columns
from governor.policy import Policy
from infra.constructs.function import GovernorFunction
from infra.constructs.shared import SharedResources, access_log_bucket, data_bucket
from infra.nag import acknowledge
from infra.settings import Settings

ENGINE_VERSION = "Athena engine version 3"
RESULTS_EXPIRY_DAYS = 30


class AuditLake(Construct):
    """Answers "who launched, opened, touched what" for any day in seconds, serverless, from the same SQL as local.

    ``grant_query(function, ...)`` lets a governor function (the report) run queries in the workgroup: the library
    shipped with its code, never the named queries, which anyone with ``athena:CreateNamedQuery`` or
    ``athena:UpdateNamedQuery`` could add or change.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, policy: Policy, settings: Settings, shared: SharedResources
    ) -> None:
        super().__init__(scope, construct_id)
        audit = policy.audit
        self._shared = shared
        self.bytes_cutoff = audit.bytes_scanned_cutoff_per_query
        base = re.sub(r"[^a-z0-9]+", "_", settings.stack_name.lower()).strip("_")
        self.database_name = f"{base}_audit"
        self.table_name = TABLE_NAME
        self.workgroup_name = f"{settings.stack_name}-audit"

        self.access_logs = access_log_bucket(
            self,
            "AccessLogs",
            "This is the server access log bucket of the trail and results buckets; logging it into itself would "
            "loop, and S3 server access logs cannot target an SSE-KMS bucket.",
        )

        self.trail: cloudtrail.Trail | None = None
        if audit.create_trail:
            self.bucket: s3.IBucket = self._trail_bucket(policy)
            trail_name = f"{settings.stack_name}-trail"
            # Built from the name, not a reference: the bucket policy must exist before the trail (no cycle).
            self.own_trail_arn = f"arn:{Aws.PARTITION}:cloudtrail:{Aws.REGION}:{Aws.ACCOUNT_ID}:trail/{trail_name}"
            self.trail = cloudtrail.Trail(
                self,
                "Trail",
                trail_name=trail_name,
                bucket=self.bucket,
                encryption_key=shared.key,
                is_multi_region_trail=True,
                include_global_service_events=True,
                enable_file_validation=True,
                management_events=cloudtrail.ReadWriteType.ALL,
                send_to_cloud_watch_logs=False,
                is_organization_trail=audit.organization_trail,
                org_id=audit.organization_id if audit.organization_trail else None,
            )
            self._allow_cloudtrail_to_encrypt()
            self._only_own_trail_writes()
            self.trail_arn = self.trail.trail_arn
        else:
            assert audit.existing_bucket_name is not None  # the policy model enforces it
            self.bucket = s3.Bucket.from_bucket_name(self, "TrailBucket", audit.existing_bucket_name)
            self.trail_arn = audit.existing_trail_arn or ""

        self.results = data_bucket(
            self,
            "Results",
            key=shared.key,
            access_logs=self.access_logs,
            log_prefix="athena-results/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    expiration=Duration.days(RESULTS_EXPIRY_DAYS),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
            # Retained like every other bucket (data_bucket): `cdk destroy` cannot delete a bucket holding results,
            # and auto-deleting would add a custom-resource function with rights to empty it (docs/deploy.md).
        )

        self.database = glue.CfnDatabase(
            self,
            "Database",
            catalog_id=Aws.ACCOUNT_ID,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=self.database_name, description="GPU Fleet Governor audit lake (CloudTrail)"
            ),
        )
        self.table = glue.CfnTable(
            self,
            "Table",
            catalog_id=Aws.ACCOUNT_ID,
            database_name=self.database_name,
            table_input=self._table_input(policy),
        )
        self.table.node.add_dependency(self.database)

        self.workgroup = athena.CfnWorkGroup(
            self,
            "WorkGroup",
            name=self.workgroup_name,
            description="GPU Fleet Governor audit queries: enforced settings, encrypted results, bytes-scanned limit",
            state="ENABLED",
            recursive_delete_option=True,
            work_group_configuration=athena.CfnWorkGroup.WorkGroupConfigurationProperty(
                enforce_work_group_configuration=True,
                publish_cloud_watch_metrics_enabled=True,
                bytes_scanned_cutoff_per_query=audit.bytes_scanned_cutoff_per_query,
                engine_version=athena.CfnWorkGroup.EngineVersionProperty(selected_engine_version=ENGINE_VERSION),
                result_configuration=athena.CfnWorkGroup.ResultConfigurationProperty(
                    output_location=f"s3://{self.results.bucket_name}/results/",
                    encryption_configuration=athena.CfnWorkGroup.EncryptionConfigurationProperty(
                        encryption_option="SSE_KMS", kms_key=shared.key.key_arn
                    ),
                ),
            ),
        )

        # For people in the console ("Saved queries") only: nothing in the template refers to them (moto's
        # CloudFormation skips the type, so a Ref or GetAtt on one fails the deploy on the emulator) and no function
        # reads them (the report runs the library shipped with its code: docs/security.md, boundary 14).
        self.named_queries: dict[str, athena.CfnNamedQuery] = {}
        for spec in list_queries():
            named = athena.CfnNamedQuery(
                self,
                "Query" + "".join(part.title() for part in spec.name.split("_")),
                name=spec.name,
                description=(spec.purpose + (f" (CIS {spec.cis})" if spec.cis else ""))[:1024],
                database=self.database_name,
                query_string=console_form(spec.sql),
                work_group=self.workgroup_name,
            )
            named.node.add_dependency(self.workgroup)
            named.node.add_dependency(self.database)
            self.named_queries[spec.name] = named

    def _trail_bucket(self, policy: Policy) -> s3.Bucket:
        audit = policy.audit
        return data_bucket(
            self,
            "TrailBucket",
            key=self._shared.key,
            access_logs=self.access_logs,
            log_prefix="trail/",
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    transitions=[
                        s3.Transition(
                            storage_class=s3.StorageClass.INFREQUENT_ACCESS,
                            transition_after=Duration.days(audit.transition_to_infrequent_access_days),
                        )
                    ],
                    expiration=Duration.days(audit.expire_after_days) if audit.expire_after_days else None,
                    noncurrent_version_expiration=Duration.days(audit.expire_after_days)
                    if audit.expire_after_days
                    else None,
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
        )

    def _allow_cloudtrail_to_encrypt(self) -> None:
        """CloudTrail encrypts log files with the project key, for this stack's trail only (aws:SourceArn, as the
        CloudTrail guide recommends for key policies)."""
        principal = iam.ServicePrincipal("cloudtrail.amazonaws.com")
        trails = f"arn:{Aws.PARTITION}:cloudtrail:*:{Aws.ACCOUNT_ID}:trail/*"
        own = {"StringEquals": {"aws:SourceArn": self.own_trail_arn}}
        self._shared.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudTrailEncryptLogs",
                principals=[principal],
                actions=["kms:GenerateDataKey*"],
                resources=["*"],
                conditions={"StringLike": {"kms:EncryptionContext:aws:cloudtrail:arn": trails}, **own},
            )
        )
        self._shared.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudTrailDescribeKey",
                principals=[principal],
                actions=["kms:DescribeKey"],
                resources=["*"],
                conditions=own,
            )
        )

    def _only_own_trail_writes(self) -> None:
        """CDK's Trail grants cloudtrail.amazonaws.com the bucket without aws:SourceArn; deny every other trail, so no
        other account's trail can write into (or probe) this bucket through the service (confused deputy)."""
        self.bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyThisStacksTrail",
                effect=iam.Effect.DENY,
                principals=[iam.ServicePrincipal("cloudtrail.amazonaws.com")],
                actions=["s3:GetBucketAcl", "s3:PutObject"],
                resources=[self.bucket.bucket_arn, self.bucket.arn_for_objects("*")],
                conditions={"StringNotEquals": {"aws:SourceArn": self.own_trail_arn}},
            )
        )

    def _location_prefix(self, policy: Policy) -> str:
        audit = policy.audit
        org = f"{audit.organization_id}/" if audit.organization_trail else ""
        return f"s3://{self.bucket.bucket_name}/AWSLogs/{org}"

    def _table_input(self, policy: Policy) -> glue.CfnTable.TableInputProperty:
        audit = policy.audit
        accounts = ",".join(audit.accounts) if audit.accounts else Aws.ACCOUNT_ID
        prefix = self._location_prefix(policy)
        return glue.CfnTable.TableInputProperty(
            name=TABLE_NAME,
            description="CloudTrail management events; partitions projected over account, region and delivery day",
            table_type="EXTERNAL_TABLE",
            parameters={
                "classification": "cloudtrail",
                "EXTERNAL": "TRUE",
                "projection.enabled": "true",
                "projection.account.type": "enum",
                "projection.account.values": accounts,
                "projection.region.type": "enum",
                "projection.region.values": ",".join(REGIONS),
                "projection.day.type": "date",
                "projection.day.format": "yyyy/MM/dd",
                "projection.day.range": f"{audit.projection_start_date.strftime('%Y/%m/%d')},NOW",
                "projection.day.interval": "1",
                "projection.day.interval.unit": "DAYS",
                "storage.location.template": prefix + "${account}/CloudTrail/${region}/${day}",
            },
            partition_keys=[glue.CfnTable.ColumnProperty(name=name, type="string") for name in PARTITION_KEYS],
            storage_descriptor=glue.CfnTable.StorageDescriptorProperty(
                location=prefix,
                input_format="com.amazon.emr.cloudtrail.CloudTrailInputFormat",
                output_format="org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat",
                serde_info=glue.CfnTable.SerdeInfoProperty(
                    serialization_library="org.apache.hive.hcatalog.data.JsonSerDe"
                ),
                columns=[glue.CfnTable.ColumnProperty(name=name, type=kind) for name, kind in hive_columns()],
            ),
        )

    def grant_query(
        self, function: GovernorFunction, query_actions: Iterable[str], data_actions: Iterable[str]
    ) -> None:
        """Let ``function`` run queries in this workgroup (the SQL it ships, never the named queries): Athena there, the
        table, the logs, the results.

        ``query_actions`` and ``data_actions`` are its Athena client's (``IAM_ACTIONS``, ``DATA_ACTIONS``): its
        Athena calls on the workgroup, and what Athena reads with its role (only the Glue ones are granted from
        those; the lake's buckets get the reads below)."""
        stack = Stack.of(self)
        workgroup_arn = stack.format_arn(service="athena", resource="workgroup", resource_name=self.workgroup_name)
        function.add_statement(sorted(query_actions), [workgroup_arn])
        function.add_statement(
            sorted(a for a in data_actions if a.startswith("glue:")),
            [
                stack.format_arn(service="glue", resource="catalog"),
                stack.format_arn(service="glue", resource="database", resource_name=self.database_name),
                stack.format_arn(
                    service="glue", resource="table", resource_name=f"{self.database_name}/{self.table_name}"
                ),
            ],
        )
        function.add_statement(
            ["s3:ListBucket", "s3:GetBucketLocation"], [self.bucket.bucket_arn, self.results.bucket_arn]
        )
        function.add_statement(["s3:GetObject"], [self.bucket.arn_for_objects("AWSLogs/*")])
        function.add_statement(
            ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
            [self.results.arn_for_objects("results/*")],
        )
        for bucket, path in ((self.bucket, "AWSLogs/*"), (self.results, "results/*")):
            acknowledge(
                function.role,
                f"AwsSolutions::AwsSolutions-IAM5[Resource::{_nag_arn(stack, bucket)}/{path}]",
                "Athena reads every CloudTrail object under AWSLogs/ and writes query results under results/ "
                "with the caller's permissions; object keys are only known at query time.",
            )
        function.function.add_environment("ATHENA_WORKGROUP", self.workgroup_name)
        function.function.add_environment("ATHENA_DATABASE", self.database_name)
        function.function.add_environment("ATHENA_BYTES_CUTOFF", str(self.bytes_cutoff))


def _nag_arn(stack: Stack, bucket: s3.IBucket) -> str:
    """How cdk-nag names a bucket's ARN in a finding: ``<LogicalId.Arn>`` for ours, the literal ARN for an import."""
    child = bucket.node.default_child
    if child is not None:
        return f"<{stack.resolve(stack.get_logical_id(child))}.Arn>"  # type: ignore[arg-type]
    return f"arn:<AWS::Partition>:s3:::{bucket.bucket_name}"
