"""The Spot capability: interruption rules, the ``spot`` function, and the checkpoint bucket jobs save to."""

from __future__ import annotations

from typing import Unpack

from aws_cdk import CfnOutput, Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from governor.adapters.ssm import DOCUMENT
from governor.domain.interruptions import FINAL_COMMAND_STATUSES
from governor.policy import Policy
from governor.registry import REGISTRY
from governor.spot.actions import CompleteLifecycleAction, Deregister, Replace
from governor.spot.capacity import DELIVERED, RECLAMATION, STATE_EVENTS
from governor.spot.domain import FINAL_STATES
from governor.spot.events import (
    BLOCK_EXPIRY,
    COMMAND_STATUS,
    REBALANCE,
    RESERVATION_WARNING,
    SOURCE,
    SSM_SOURCE,
    STATE_CHANGE,
    WARNING,
)
from infra.constructs.function import CapabilityArgs, CapabilityConstruct, FunctionOptions, GovernorFunction
from infra.constructs.shared import SharedResources, access_log_bucket, data_bucket, send_command_grant
from infra.layer_manifest import MB
from infra.nag import acknowledge, acknowledge_wildcard

CHECKPOINT_PREFIX = "checkpoints"
ACCESS_LOG_DAYS = 365
#: The EC2 resources in this account a RunInstances from a launch template touches (granted, then acknowledged).
LAUNCH_RESOURCES = (
    "subnet",
    "network-interface",
    "security-group",
    "volume",
    "launch-template",
    "key-pair",
    "spot-instances-request",
)


def _reads(actions: frozenset[str]) -> list[str]:
    """The Describe* reads among ``actions`` (no resource-level permissions)."""
    return [action for action in actions if ":Describe" in action]


def _writes(actions: frozenset[str]) -> list[str]:
    return sorted(action for action in actions if ":Describe" not in action)


class Spot(CapabilityConstruct):
    """One function with reserved concurrency on three rules (warnings, rebalance and the capacity lifecycle;
    stop/terminate; SSM status).

    Its role holds only what the policy switches on: load-balancer deregistration, Auto Scaling lifecycle
    completion and, with ``replacement`` set, RunInstances for GPU types from launch templates.
    """

    CAPABILITY = REGISTRY["spot"]
    TIMEOUT = Duration.minutes(3)  # checkpoint first; recording and recovery may outlast the warning
    UNZIPPED_BUDGET = (
        40 * MB,
        "its cold start is spent inside the two-minute interruption warning, so it ships no chart or Kubernetes "
        "library (issue 47)",
    )

    def __init__(self, scope: Construct, construct_id: str, **args: Unpack[CapabilityArgs]) -> None:
        super().__init__(scope, construct_id, **args)
        policy = self.policy
        spot = policy.spot
        # The capacity lifecycle by name, not by AWS's own prefix on "EC2 Capacity Reservation": that prefix would also
        # route event kinds AWS adds later, which the function does not handle and would park in its DLQ.
        capacity = [*DELIVERED, *STATE_EVENTS, RECLAMATION]
        self.on_rule(
            "Interruption",
            events.EventPattern(
                source=[SOURCE], detail_type=[WARNING, REBALANCE, RESERVATION_WARNING, *BLOCK_EXPIRY, *capacity]
            ),
        )
        self.on_rule(
            "StateChange",
            events.EventPattern(source=[SOURCE], detail_type=[STATE_CHANGE], detail={"state": list(FINAL_STATES)}),
        )
        self.on_rule(
            "CheckpointStatus",
            events.EventPattern(
                source=[SSM_SOURCE],
                detail_type=[COMMAND_STATUS],
                detail={"status": list(FINAL_COMMAND_STATUSES), "document-name": [DOCUMENT]},
            ),
        )
        self._grants(policy)
        self.bucket: s3.Bucket | None = None
        self.checkpoint_policy: iam.ManagedPolicy | None = None
        if spot.checkpoint_bucket.create:
            self._checkpoint_bucket(self.shared, policy)

    def function_options(self, functions: dict[str, GovernorFunction]) -> FunctionOptions:
        """Opt-in reserved concurrency, so a burst of other functions never delays an interruption warning."""
        return {"reserved_concurrency": self.policy.spot.reserved_concurrency}

    def _grants(self, policy: Policy) -> None:
        spot = policy.spot
        stack = Stack.of(self)
        # The adapters' reads, and the Describe* reads of the recovery actions the policy switches on.
        reads: list[str] = []
        for action in (Deregister, CompleteLifecycleAction, Replace):
            reads += _reads(action.permissions(policy))
        self.add_adapter_reads(
            "Describe* reads and ssm:GetCommandInvocation support no resource-level permissions: the function "
            "re-reads the interrupted instance, finds the target groups and Auto Scaling group holding it, subnets "
            "for fallback zones, and the final status of its own checkpoint command (ListCommands finds it by its "
            "intent id, so a retry never sends it twice).",
            also=reads,
        )
        send_command_grant(self.function, policy, DOCUMENT)
        acknowledge_wildcard(
            self.function.role,
            stack.format_arn(service="ec2", resource="instance", resource_name="*"),
            "Interrupted instances are unknown at deploy time. SendCommand is limited to the AWS-RunShellScript "
            "document and to instances carrying fleet.fleet_tags (ssm:resourceTag); RunInstances (when replacement "
            "is on) to GPU-family types by the ec2:InstanceType condition.",
        )
        if spot.deregister_from_target_groups:
            groups = stack.format_arn(service="elasticloadbalancing", resource="targetgroup", resource_name="*/*")
            fleet = {f"aws:ResourceTag/{key}": value for key, value in policy.fleet.fleet_tags.items()}
            self.function.add_statement(_writes(Deregister.permissions(policy)), [groups], {"StringEquals": fleet})
            acknowledge_wildcard(
                self.function.role,
                groups,
                "Target groups are created after deploy; DeregisterTargets only, and only on target groups carrying "
                "fleet.fleet_tags (aws:ResourceTag, checked in code too): a web service's target group is never "
                "drained by a Spot warning.",
            )
        if spot.complete_lifecycle_action:
            groups = (
                f"arn:{stack.partition}:autoscaling:{stack.region}:{stack.account}:autoScalingGroup:*:"
                "autoScalingGroupName/*"
            )
            self.function.add_statement(_writes(CompleteLifecycleAction.permissions(policy)), [groups])
            acknowledge_wildcard(
                self.function.role,
                groups,
                "Any Auto Scaling group may hold an interrupted instance in Terminating:Wait; CompleteLifecycleAction "
                "only lets a termination that EC2 performs anyway proceed once the checkpoint finished.",
            )
        if spot.replacement != "none":
            self._replacement_grants(policy)

    def _replacement_grants(self, policy: Policy) -> None:
        """RunInstances from launch templates, GPU types only; tags only at launch; roles passed only to EC2."""
        stack = Stack.of(self)
        families = policy.fleet.iam_instance_type_patterns()
        instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
        self.function.add_statement(
            ["ec2:RunInstances"], [instances], conditions={"StringLike": {"ec2:InstanceType": families}}
        )
        parts = [stack.format_arn(service="ec2", resource=kind, resource_name="*") for kind in LAUNCH_RESOURCES]
        parts.append(stack.format_arn(service="ec2", account="", resource="image", resource_name="*"))
        self.function.add_statement(["ec2:RunInstances"], parts)
        tagged = [
            stack.format_arn(service="ec2", resource=kind, resource_name="*")
            for kind in ("instance", "volume", "network-interface", "spot-instances-request")
        ]
        self.function.add_statement(
            ["ec2:CreateTags"], tagged, conditions={"StringEquals": {"ec2:CreateAction": "RunInstances"}}
        )
        roles = stack.format_arn(service="iam", region="", resource="role", resource_name="*")
        self.function.add_statement(
            ["iam:PassRole"], [roles], conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
        )
        for resource, reason in (
            (
                parts[-1],
                "The launch template names the AMI; any AMI the template uses must be launchable.",
            ),
            (
                roles,
                "The launch template's instance profile role is chosen by fleet owners; PassRole is limited to "
                "passing roles to EC2 (iam:PassedToService).",
            ),
        ):
            acknowledge_wildcard(self.function.role, resource, reason)
        for resource in parts[:-1]:
            acknowledge_wildcard(
                self.function.role,
                resource,
                "RunInstances from a launch template touches the template's own subnet, interfaces, security groups, "
                "volumes, key pair and Spot request; tags may be written only in the same call (ec2:CreateAction).",
            )

    def _checkpoint_bucket(self, shared: SharedResources, policy: Policy) -> None:
        """Versioned, KMS-encrypted, TLS-only checkpoints, with a managed policy scoped to each team's prefix."""
        settings = policy.spot.checkpoint_bucket
        scope = Construct(self, "Checkpoints")
        # Grant S3 log delivery through the log bucket's policy (ACLs stay disabled), as AWS now recommends.
        scope.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        access_logs = access_log_bucket(
            scope,
            "AccessLogs",
            "This bucket receives the checkpoint bucket's server access logs; logging it would need yet another "
            "bucket and log deliveries about log deliveries.",
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(id="ExpireAccessLogs", expiration=Duration.days(ACCESS_LOG_DAYS))],
        )
        rule = s3.LifecycleRule(
            id="ExpireOldCheckpointVersions",
            noncurrent_version_expiration=Duration.days(settings.noncurrent_version_expiry_days),
            noncurrent_versions_to_retain=settings.noncurrent_versions_to_keep or None,
            abort_incomplete_multipart_upload_after=Duration.days(1),
        )
        self.bucket = data_bucket(
            scope,
            "Bucket",
            key=shared.key,
            access_logs=access_logs,
            log_prefix="checkpoint-bucket/",
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                rule,
                s3.LifecycleRule(id="RemoveExpiredDeleteMarkers", expired_object_delete_marker=True),
            ],
        )
        team = f"${{aws:PrincipalTag/{policy.fleet.team_tag}}}"
        prefix = f"{CHECKPOINT_PREFIX}/{team}/*"
        stack = Stack.of(self)
        self.checkpoint_policy = iam.ManagedPolicy(
            scope,
            "Access",
            description=(
                "Attach to GPU fleet instance roles: read and write checkpoints under "
                f"{CHECKPOINT_PREFIX}/<the role's {policy.fleet.team_tag} tag>/<job>/ in the checkpoint bucket"
            ),
            statements=[
                iam.PolicyStatement(
                    sid="ListOwnTeamPrefix",
                    actions=["s3:ListBucket", "s3:ListBucketVersions"],
                    resources=[self.bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{CHECKPOINT_PREFIX}/{team}/", prefix]}},
                ),
                iam.PolicyStatement(
                    sid="ReadWriteOwnTeamPrefix",
                    actions=[
                        "s3:GetObject",
                        "s3:GetObjectVersion",
                        "s3:PutObject",
                        "s3:DeleteObject",
                        "s3:AbortMultipartUpload",
                        "s3:ListMultipartUploadParts",
                    ],
                    resources=[self.bucket.arn_for_objects(prefix)],
                ),
                iam.PolicyStatement(
                    sid="ProjectKeyThroughS3Only",
                    actions=["kms:GenerateDataKey", "kms:Decrypt"],
                    resources=[shared.key.key_arn],
                    conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com"}},
                ),
            ],
        )
        bucket_id = stack.resolve(stack.get_logical_id(self.bucket.node.default_child))  # type: ignore[arg-type]
        acknowledge(
            self.checkpoint_policy,
            # cdk-nag writes the policy variable ${aws:PrincipalTag/team} as <aws:PrincipalTag/team>
            f"AwsSolutions::AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/{CHECKPOINT_PREFIX}/"
            f"<aws:PrincipalTag/{policy.fleet.team_tag}>/*]",
            "Job names are chosen by each training job; the prefix is fixed to the team in the instance role's own "
            f"{policy.fleet.team_tag} tag (aws:PrincipalTag), so a team reads and writes only its own checkpoints.",
        )
        CfnOutput(self, "CheckpointBucketName", value=self.bucket.bucket_name, description="Spot checkpoint bucket")
        CfnOutput(
            self,
            "CheckpointPolicyArn",
            value=self.checkpoint_policy.managed_policy_arn,
            description="Managed policy to attach to GPU fleet instance roles (tag the role with the team)",
        )
