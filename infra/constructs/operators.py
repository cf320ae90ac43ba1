"""The platform's access model for people: a ``gpu-admin`` role for scheduling GPU instances and a read-only auditor.

Both are assumable by principals of this account that their own IAM policies allow to (``sts:AssumeRole``), so the
account's administrators decide who gets them. Every grant is scoped to the governor's own resources or, for EC2
instances that are unknown at deploy time, to GPU instance types by condition.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from governor.policy import Policy
from infra.constructs.audit import AuditLake
from infra.constructs.function import CapabilityConstruct
from infra.constructs.reserved_tags import reserved_keys, reserved_tag_document
from infra.constructs.shared import SharedResources
from infra.nag import acknowledge, acknowledge_wildcard

SCHEDULING_ACTIONS = ("ec2:StartInstances", "ec2:StopInstances", "ec2:RebootInstances")
TAG_ACTIONS = ("ec2:CreateTags", "ec2:DeleteTags")
EC2_READS = ("ec2:DescribeInstances", "ec2:DescribeInstanceStatus", "ec2:DescribeTags")
LEDGER_READS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:DescribeTable")
ATHENA_ACTIONS = (
    "athena:StartQueryExecution",
    "athena:GetQueryExecution",
    "athena:GetQueryResults",
    "athena:StopQueryExecution",
    "athena:ListQueryExecutions",
    "athena:GetWorkGroup",
    "athena:ListNamedQueries",
    "athena:GetNamedQuery",
    "athena:BatchGetNamedQuery",
)
GLUE_READS = ("glue:GetDatabase", "glue:GetTable", "glue:GetPartition", "glue:GetPartitions")
GOVERNOR_TAG_KEYS = "governor:*"


class OperatorRoles(Construct):
    """``gpu-admin``: start, stop and reboot GPU instances, set ``governor:*`` tags (snooze, exemption), read the ledger
    and the reports. ``auditor``: read the reports and the ledger, and query the audit lake in its Athena workgroup.
    Neither can change security groups, keys, IAM, or any non-GPU instance.

    Compose it last in the stack: it finds the audit lake and the buckets capabilities keep for people to read
    (``CapabilityConstruct.operator_reads``: the reports archive) among the constructs already built, so a deployment
    without one of them simply grants nothing for it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        shared: SharedResources,
        policy: Policy,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        lakes = [c for c in stack.node.find_all() if isinstance(c, AuditLake)]
        reads = [read for c in stack.node.find_all() if isinstance(c, CapabilityConstruct) for read in c.operator_reads]
        self._stack = stack
        self._shared = shared
        self.gpu_admin = self._role(
            "GpuAdmin", "gpu-admin", "GPU instance scheduling, governor:* tags, ledger and reports"
        )
        self.auditor = self._role("Auditor", "auditor", "read-only reports, ledger and audit-lake queries")
        instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
        gpu_only = {"StringLike": {"ec2:InstanceType": policy.fleet.iam_instance_type_patterns()}}
        self.gpu_admin.add_to_policy(
            iam.PolicyStatement(actions=list(SCHEDULING_ACTIONS), resources=[instances], conditions=gpu_only)
        )
        governor_keys = {
            "ForAllValues:StringLike": {"aws:TagKeys": [GOVERNOR_TAG_KEYS]},
            "Null": {"aws:TagKeys": "false"},
        }
        self.gpu_admin.add_to_policy(
            iam.PolicyStatement(
                actions=["ec2:CreateTags"], resources=[instances], conditions={**gpu_only, **governor_keys}
            )
        )
        # ec2:DeleteTags does not support ec2:InstanceType; with it the statement never matches and no snooze could
        # ever be removed. The governor:* key condition alone bounds it.
        self.gpu_admin.add_to_policy(
            iam.PolicyStatement(actions=["ec2:DeleteTags"], resources=[instances], conditions=governor_keys)
        )
        self.gpu_admin.add_to_policy(iam.PolicyStatement(actions=list(EC2_READS), resources=["*"]))
        acknowledge(
            self.gpu_admin,
            "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
            "ec2:DescribeInstances, DescribeInstanceStatus and DescribeTags support no resource-level permissions; "
            "they are reads, needed to find the GPU instance to schedule.",
        )
        acknowledge_wildcard(
            self.gpu_admin,
            instances,
            "Instances are launched after deployment; start/stop/reboot and CreateTags are limited to GPU "
            "instance types by the ec2:InstanceType condition (DeleteTags does not support it), and tag writes and "
            "deletions to governor:* keys by aws:TagKeys.",
        )
        for role in (self.gpu_admin, self.auditor):
            self._read_ledger(role)
            for bucket, why in reads:
                self._read_bucket(role, bucket, "*", why)
        for lake in lakes:
            self._query_lake(lake.workgroup_name, lake.database_name, lake.table_name, [lake.bucket], lake.results)
        self.reserved_tags = self._reserved_tags(policy)

    def _reserved_tags(self, policy: Policy) -> iam.ManagedPolicy:
        """The single-account form of the reserved tag keys (``infra.constructs.reserved_tags``): a managed policy that
        does nothing until attached to the roles and groups people use; the governor's roles and gpu-admin keep the
        keys."""
        allowed = [*self._shared.publisher_role_arns(), self.gpu_admin.role_arn]
        document = iam.PolicyDocument.from_json(reserved_tag_document(policy, allowed))
        managed = iam.ManagedPolicy(
            self,
            "ReservedTagKeys",
            description="Attach to every role and group people use: only the governor and gpu-admin write "
            + ", ".join(reserved_keys(policy))
            + " tags",
            document=document,
        )
        CfnOutput(
            self._stack,
            "ReservedTagKeysPolicyArn",
            value=managed.managed_policy_arn,
            description="Attach to the roles and groups people use: reserves the fleet and governor:* tag keys "
            "(docs/security.md)",
        )
        return managed

    def _role(self, construct_id: str, name: str, purpose: str) -> iam.Role:
        """A role people of this account assume (if their own IAM policies allow it), for four hours at most."""
        stack = self._stack
        return iam.Role(
            self,
            construct_id,
            # IAM is global: the region keeps the names of the stacks in other regions apart.
            role_name=f"{stack.stack_name}-{name}-{stack.region}",
            assumed_by=iam.AccountPrincipal(stack.account),
            max_session_duration=Duration.hours(4),
            description=f"GPU Fleet Governor {name}: {purpose}",
        )

    def _nag_ref(self, construct: IConstruct) -> str:
        child = construct.node.default_child
        if child is None:
            return ""
        return f"<{self._stack.resolve(self._stack.get_logical_id(child))}.Arn>"  # type: ignore[arg-type]

    def _read_ledger(self, role: iam.Role) -> None:
        ledger = self._shared.ledger
        role.add_to_policy(
            iam.PolicyStatement(actions=list(LEDGER_READS), resources=[ledger.table_arn, f"{ledger.table_arn}/index/*"])
        )
        acknowledge(
            role,
            f"AwsSolutions::AwsSolutions-IAM5[Resource::{self._nag_ref(ledger)}/index/*]",
            "Reads only (GetItem, Query) on the ledger's own indexes, which reports query by kind and time.",
        )
        self._decrypt_via(role, "dynamodb")

    def _decrypt_via(self, role: iam.Role, service: str) -> None:
        """The project key decrypts only through the named service on this account's behalf, never directly."""
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:DescribeKey"],
                resources=[self._shared.key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"{service}.{self._stack.region}.amazonaws.com"}},
            )
        )

    def _read_bucket(self, role: iam.Role, bucket: s3.IBucket, prefix: str, why: str) -> None:
        role.add_to_policy(
            iam.PolicyStatement(actions=["s3:ListBucket", "s3:GetBucketLocation"], resources=[bucket.bucket_arn])
        )
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[bucket.arn_for_objects(prefix)]))
        ref = self._nag_ref(bucket) or f"arn:<AWS::Partition>:s3:::{bucket.bucket_name}"
        acknowledge(role, f"AwsSolutions::AwsSolutions-IAM5[Resource::{ref}/{prefix}]", why)
        self._decrypt_via(role, "s3")

    def _query_lake(
        self,
        workgroup_name: str,
        database_name: str,
        table_name: str,
        lake_buckets: Sequence[s3.IBucket],
        results_bucket: s3.IBucket | None,
    ) -> None:
        """Athena in the governor's workgroup only (its bytes-scanned limit applies), over the lake's table only."""
        stack = self._stack
        role = self.auditor
        role.add_to_policy(
            iam.PolicyStatement(
                actions=list(ATHENA_ACTIONS),
                resources=[stack.format_arn(service="athena", resource="workgroup", resource_name=workgroup_name)],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=list(GLUE_READS),
                resources=[
                    stack.format_arn(service="glue", resource="catalog"),
                    stack.format_arn(service="glue", resource="database", resource_name=database_name),
                    stack.format_arn(service="glue", resource="table", resource_name=f"{database_name}/{table_name}"),
                ],
            )
        )
        for bucket in lake_buckets:
            self._read_bucket(
                role,
                bucket,
                "AWSLogs/*",
                "Athena reads CloudTrail objects under AWSLogs/ as the caller.",
            )
        if results_bucket is not None:
            self._read_bucket(
                role, results_bucket, "results/*", "Athena writes and reads query results under results/ only."
            )
            role.add_to_policy(
                iam.PolicyStatement(
                    actions=["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
                    resources=[results_bucket.arn_for_objects("results/*")],
                )
            )
            role.add_to_policy(
                iam.PolicyStatement(
                    actions=["kms:GenerateDataKey"],
                    resources=[self._shared.key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com"}},
                )
            )
