"""The pieces every capability stands on: key, ledger, idempotency table, the governor bus, the alert topic."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from governor.policy import Policy


class SharedResources(Construct):
    """Encrypted stores with the project's own key; rotation period from the keys policy (at most 90 days)."""

    def __init__(self, scope: Construct, construct_id: str, *, policy: Policy, bus_name: str) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description="GPU Fleet Governor: ledger, queues, logs, bus archive and trail",
            enable_key_rotation=True,
            rotation_period=Duration.days(policy.keys.kms_max_rotation_days),
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.ledger = dynamodb.Table(
            self,
            "Ledger",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            time_to_live_attribute="expires_at",
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.ledger.add_global_secondary_index(
            index_name="by-kind",
            partition_key=dynamodb.Attribute(name="kind", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="at", type=dynamodb.AttributeType.STRING),
        )
        self.idempotency = dynamodb.Table(
            self,
            "Idempotency",
            partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            time_to_live_attribute="expiration",
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.bus = events.EventBus(self, "Bus", event_bus_name=bus_name, kms_key=self.key)
        self.archive = self.bus.archive(
            "Archive",
            description="Every governor finding, replayable",
            event_pattern=events.EventPattern(source=["gpu-fleet-governor"]),
            retention=Duration.days(policy.ledger.retention_days),
        )
        self.alerts = sns.Topic(
            self, "Alerts", display_name="GPU Fleet Governor alerts", master_key=self.key, enforce_ssl=True
        )
        region = Stack.of(self).region
        for service in (f"logs.{region}", "sns", "events", "cloudwatch", "sqs", "scheduler"):
            self.key.grant_encrypt_decrypt(iam.ServicePrincipal(f"{service}.amazonaws.com"))
