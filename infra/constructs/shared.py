"""The pieces every capability stands on: key, ledger, idempotency table, the governor bus, the alert topic."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import jsii
from aws_cdk import Aws, Duration, IStableListProducer, Lazy, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from governor.domain.actions import Checkpoint
from governor.policy import Policy
from infra.nag import acknowledge, acknowledge_access_log_bucket


class Grantee(Protocol):
    """What a grant helper here needs of a function (``infra.constructs.function.GovernorFunction``): this module
    builds what every function uses, so it does not import the function construct."""

    @property
    def role(self) -> iam.IRole: ...

    def add_statement(
        self,
        actions: Iterable[str],
        resources: Sequence[str],
        conditions: dict[str, object] | None = None,
        *,
        reason: str | None = None,
    ) -> None: ...


# The services that use the project key on the stack's behalf, and the ARNs of the resources they act for. Each
# statement carries aws:SourceAccount and aws:SourceArn, so another account's alarm, rule or queue cannot have the
# service use this key for it (the confused-deputy guard AWS recommends for service principals).
_KEY_USERS: dict[str, str] = {
    "sns": "sns:{region}:{account}:*",
    "events": "events:{region}:{account}:*",
    "cloudwatch": "cloudwatch:{region}:{account}:alarm:*",
    "sqs": "sqs:{region}:{account}:*",
    "scheduler": "scheduler:{region}:{account}:schedule/*",
}
KEY_ACTIONS = ["kms:Decrypt", "kms:Encrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*"]


def _string(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=dynamodb.AttributeType.STRING)


class SharedResources(Construct):
    """Encrypted stores with the project's own key; rotation period from the keys policy (at most 90 days), which the
    keys enforcer's construct sets on it."""

    def __init__(self, scope: Construct, construct_id: str, *, policy: Policy, bus_name: str) -> None:
        super().__init__(scope, construct_id)
        self._publishers: list[iam.IRole] = []
        self.key = kms.Key(
            self,
            "Key",
            description="GPU Fleet Governor: ledger, queues, logs, bus archive and trail",
            enable_key_rotation=True,
            # its rotation period is the keys policy's, which the keys enforcer's construct sets on it
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.ledger = self._table(
            "Ledger",
            "pk",
            ttl="expires_at",
            sort_key=_string("sk"),
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.ledger.add_global_secondary_index(
            index_name="by-kind",
            partition_key=_string("kind"),
            sort_key=_string("at"),
        )
        # Sparse: only an organisation target's own state carries ``target`` (``account#region``), so each target
        # reads its own marks and outbox, not the organisation's (adapters.ledger.DynamoLedger.query_target).
        self.ledger.add_global_secondary_index(
            index_name="by-target",
            partition_key=_string("target"),
            sort_key=_string("kind"),
        )
        self.idempotency = self._table("Idempotency", "id", ttl="expiration", removal_policy=RemovalPolicy.DESTROY)
        self.bus = self._encrypted_bus(bus_name)
        self.archive = self.bus.archive(
            "Archive",
            description="Every governor finding, replayable",
            event_pattern=events.EventPattern(source=["gpu-fleet-governor"]),
            retention=Duration.days(policy.ledger.retention_days),
            kms_key=self.key,
        )
        # EventBus.archive() in this CDK version renders KmsKeyIdentifier as "" (an AWS-owned key): set it here.
        archive_resource = self.archive.node.default_child
        assert isinstance(archive_resource, events.CfnArchive)
        archive_resource.kms_key_identifier = self.key.key_arn
        self._only_governor_functions_publish()
        self._events_may_describe_the_bus_key()
        self.alerts = sns.Topic(
            self, "Alerts", display_name="GPU Fleet Governor alerts", master_key=self.key, enforce_ssl=True
        )
        self._key_service_principals()

    def _table(self, construct_id: str, partition: str, *, ttl: str, **options: Any) -> dynamodb.Table:
        """On-demand, point-in-time recoverable, encrypted with the project key, items expiring on ``ttl``."""
        return dynamodb.Table(
            self,
            construct_id,
            partition_key=_string(partition),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            time_to_live_attribute=ttl,
            **options,
        )

    def _key_service_principals(self) -> None:
        """Services may use the key only for this account's resources (aws:SourceAccount / aws:SourceArn); CloudWatch
        Logs, which AWS documents with an encryption-context condition instead, only for this account's log groups."""
        partition, region, account = Aws.PARTITION, Aws.REGION, Aws.ACCOUNT_ID
        for service, resources in _KEY_USERS.items():
            self.key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=f"KeyUseBy{service.capitalize()}ForThisAccountOnly",
                    principals=[iam.ServicePrincipal(f"{service}.amazonaws.com")],
                    actions=KEY_ACTIONS,
                    resources=["*"],
                    conditions={
                        "StringEquals": {"aws:SourceAccount": account},
                        "ArnLike": {
                            "aws:SourceArn": f"arn:{partition}:" + resources.format(region=region, account=account)
                        },
                    },
                )
            )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="KeyUseByLogsForThisAccountsLogGroupsOnly",
                principals=[iam.ServicePrincipal(f"logs.{Stack.of(self).region}.amazonaws.com")],
                actions=KEY_ACTIONS,
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": f"arn:{partition}:logs:{region}:{account}:log-group:*"
                    }
                },
            )
        )

    def _encrypted_bus(self, bus_name: str) -> events.EventBus:
        """The governor bus, encrypted with the project key, EventBridge allowed to use the key for it alone.

        ``EventBus(kms_key=...)`` would add CDK's own statement, which also lists ``kms:DescribeKey`` under the
        ``kms:EncryptionContext:aws:events:event-bus:arn`` condition; DescribeKey requests carry no encryption context
        (Service Authorization Reference), so that part never applies and only reads as a grant. The key is set on the
        bus here, and the statement below allows only the calls that carry the bus's encryption context;
        DescribeKey has its own statement (:meth:`_events_may_describe_the_bus_key`).
        """
        bus = events.EventBus(self, "Bus", event_bus_name=bus_name)
        resource = bus.node.default_child
        assert isinstance(resource, events.CfnEventBus)
        resource.kms_key_identifier = self.key.key_arn
        stack = Stack.of(self)
        bus_arn = stack.format_arn(service="events", resource="event-bus", resource_name=bus_name)
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="EventBridgeEncryptsTheBus",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],
                conditions={
                    "StringEquals": {
                        "aws:SourceAccount": stack.account,
                        "aws:SourceArn": bus_arn,
                        "kms:EncryptionContext:aws:events:event-bus:arn": bus_arn,
                    }
                },
            )
        )
        return bus

    def _events_may_describe_the_bus_key(self) -> None:
        """EventBridge calls DescribeKey to verify the bus key when the bus is created or updated.

        DescribeKey requests carry no encryption context (Service Authorization Reference), so the bus's own
        statement (:meth:`_encrypted_bus`) cannot cover it under its encryption-context condition. This one is held
        to EventBridge acting for this account (``aws:SourceAccount``) on its resources in this region
        (``aws:SourceArn``: the bus and its archive, which uses the same key), the global keys EventBridge's
        key-policy guidance names; DescribeKey reveals only the key's metadata.
        """
        stack = Stack.of(self)
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="EventBridgeVerifiesTheBusKey",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:DescribeKey"],
                resources=["*"],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": stack.format_arn(service="events", resource="*")},
                },
            )
        )

    def _only_governor_functions_publish(self) -> None:
        """Only the stack's own function roles may put events on the governor bus; everyone else is denied.

        Same-account principals with ``events:PutEvents`` in their identity policy would otherwise be allowed, so
        this is an explicit deny on every other principal (``aws:PrincipalArn``), resolved at synth time from the
        functions the capability constructs registered.
        """
        self.bus.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyGovernorFunctionsPublish",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["events:PutEvents"],
                resources=[self.bus.event_bus_arn],
                conditions={
                    "ArnNotEquals": {
                        "aws:PrincipalArn": Lazy.list(_Publishers(self)),
                    }
                },
            )
        )

    def add_publisher(self, role: iam.IRole) -> None:
        """A governor function's execution role: one of the only principals allowed to publish on the bus."""
        self._publishers.append(role)

    def publisher_role_arns(self) -> list[str]:
        """The execution role ARNs of every governor function in this stack (the only allowed publishers), in the
        order of the roles' construct paths: an ARN is a token until synth, and a token's text depends on how many
        tokens the process made before, so sorting by it gave a template that differed with the process's history."""
        stack = Stack.of(self)
        roles = {role.node.path: role for role in self._publishers if Stack.of(role) is stack}
        return [roles[path].role_arn for path in sorted(roles)]


@jsii.implements(IStableListProducer)
class _Publishers:
    """Resolves, at synth time, to the role ARNs of every function the capability constructs added after the bus."""

    def __init__(self, shared: SharedResources) -> None:
        self._shared = shared

    def produce(self) -> list[str] | None:
        return self._shared.publisher_role_arns()


def send_command_grant(function: Grantee, policy: Policy, document: str) -> None:
    """``ssm:SendCommand`` with one document, on instances carrying every ``fleet.fleet_tags`` pair only.

    The Service Authorization Reference lists ``ssm:resourceTag/${TagKey}`` for SendCommand's instance resource, and
    AWS's own examples put the document and the tagged instances in two statements, since the document carries no
    such tag. Without the condition, the role could run shell on any instance in the region.
    """
    stack = Stack.of(function.role)
    instances = stack.format_arn(service="ec2", resource="instance", resource_name="*")
    arn = stack.format_arn(service="ssm", account="", resource="document", resource_name=document)
    function.add_statement(Checkpoint.IAM, [arn])
    function.add_statement(
        Checkpoint.IAM,
        [instances],
        {"StringEquals": {f"ssm:resourceTag/{key}": value for key, value in policy.fleet.fleet_tags.items()}},
    )


def data_bucket(
    scope: Construct, construct_id: str, *, key: kms.IKey, access_logs: s3.IBucket, log_prefix: str, **options: Any
) -> s3.Bucket:
    """A bucket of the project's data: encrypted with the project key (S3 Bucket Keys on), public access blocked,
    TLS only, its requests logged to ``access_logs`` under ``log_prefix``, kept when the stack is deleted."""
    return s3.Bucket(
        scope,
        construct_id,
        encryption=s3.BucketEncryption.KMS,
        encryption_key=key,
        bucket_key_enabled=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix=log_prefix,
        removal_policy=RemovalPolicy.RETAIN,
        **options,
    )


def access_log_bucket(scope: Construct, construct_id: str, reason: str, **options: Any) -> s3.Bucket:
    """A bucket for S3 server access logs (which cannot target an SSE-KMS bucket): S3-managed encryption, public
    access blocked, TLS only, kept; not logged itself, acknowledged (AwsSolutions-S1) with ``reason``."""
    bucket = s3.Bucket(
        scope,
        construct_id,
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        removal_policy=RemovalPolicy.RETAIN,
        **options,
    )
    acknowledge(bucket, "AwsSolutions::AwsSolutions-S1", reason)
    acknowledge_access_log_bucket(bucket)
    return bucket


def dead_letter_queue(scope: Construct, construct_id: str, key: kms.IKey | None, reason: str) -> sqs.Queue:
    """A dead-letter queue: TLS only, kept 14 days (SQS's longest), encrypted with ``key`` (with SQS-managed keys
    where there is none: the spoke has no project key), and cdk-nag's SQS3 (a DLQ of its own) acknowledged with
    ``reason``: a DLQ for a DLQ would only move the same messages one hop."""
    encryption: dict[str, Any] = (
        {"encryption": sqs.QueueEncryption.KMS, "encryption_master_key": key}
        if key is not None
        else {"encryption": sqs.QueueEncryption.SQS_MANAGED}
    )
    queue = sqs.Queue(scope, construct_id, enforce_ssl=True, retention_period=Duration.days(14), **encryption)
    acknowledge(queue, "AwsSolutions::AwsSolutions-SQS3", reason)
    return queue
