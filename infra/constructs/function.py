"""The one Lambda factory: every governor function is built here, the same way.

arm64, Python 3.14, JSON logs into a KMS-encrypted log group with retention, X-Ray, the shared ``lambdas/`` asset,
the dependency layers of what its handler imports (``infra.constructs.layer``), the policy sections it needs, an
encrypted TLS-only DLQ that also receives failed async invocations, and alarms on errors and on DLQ depth.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import import_module
from typing import Any, ClassVar, NamedTuple, NotRequired, TypedDict, Unpack

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from constructs import Construct

from governor.capability import BASE_PERMISSIONS, BUS, DLQ, IDEMPOTENCY, KMS, LEDGER, LOGS, Capability
from governor.events.envelopes import CLOUDTRAIL_DETAIL_TYPE
from governor.events.findings import DETAIL_TYPE as FINDING_DETAIL_TYPE
from governor.events.findings import SOURCE as FINDING_SOURCE
from governor.policy import Policy, environment_policy
from infra.asset import ASSET_EXCLUDES
from infra.constructs.layer import function_layers
from infra.constructs.shared import SharedResources, dead_letter_queue
from infra.nag import acknowledge, nag_name
from infra.settings import LAMBDAS_DIR, Settings

RUNTIME = lambda_.Runtime.PYTHON_3_14


def policy_subset(policy: Policy, sections: Sequence[str], function: str = "governor") -> str:
    """Only the sections a function uses go into its environment, and of those only what differs from the model's
    defaults (the function's code, deployed with it, holds the same defaults and fills them in: the shipped policy
    takes a few bytes, so a fleet's own price table and clusters have the room). Too large an environment stops the
    synth, not the deploy: the stack counts every function's as Lambda does (``infra.environment``)."""
    return environment_policy(policy, sections)


class UndeclaredPermission(ValueError):
    """A construct granted an action its capability's registry entry does not list."""


class GovernorFunction(Construct):
    """A governor Lambda for one registered capability, with its own role, log group, DLQ and alarms.

    Its role may grant only what the registry lists for it (``capability.permissions(policy)`` plus the shared
    runtime's): callers scope those actions to resources and conditions, and add triggers.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        capability: Capability,
        shared: SharedResources,
        policy: Policy,
        settings: Settings,
        timeout: Duration = Duration.minutes(1),
        memory_mb: int = 512,
        reserved_concurrency: int | None = None,
        environment: dict[str, str] | None = None,
        unzipped_budget: tuple[int, str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        name = capability.name
        self.capability = capability
        self.name = name
        self.description = capability.description
        organization = settings.organization is not None
        self.allowed = capability.permissions(policy, organization=organization) | BASE_PERMISSIONS
        self.triggers: list[str] = []
        #: Every default-bus pattern this function is triggered by, as (rule id, pattern, description): the
        #: organisation hub routes the same patterns from its intake bus and the spoke forwards exactly these.
        self.event_patterns: list[tuple[str, events.EventPattern, str]] = []
        self._shared = shared
        self._schedule_role: iam.Role | None = None
        self.dlq = dead_letter_queue(
            self,
            "Dlq",
            shared.key,
            "This queue is the function's dead-letter queue (Lambda on-failure destination, rule-target DLQ and "
            "the parking place for rejected events); a DLQ for it would only move the same messages one hop.",
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=_retention(settings.log_retention_days),
            encryption_key=shared.key,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"GPU Fleet Governor {name} function: only the actions its code declares",
        )
        shared.add_publisher(self.role)
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=sorted(LOGS),
                resources=[self.log_group.log_group_arn, f"{self.log_group.log_group_arn}:log-stream:*"],
            )
        )
        self.function = lambda_.Function(
            self,
            "Function",
            description=self.description,
            runtime=RUNTIME,
            architecture=lambda_.Architecture.ARM_64,
            handler=capability.handler,
            code=lambda_.Code.from_asset(str(LAMBDAS_DIR), exclude=ASSET_EXCLUDES),
            layers=function_layers(Stack.of(self), settings, name, unzipped_budget),
            role=self.role,
            timeout=timeout,
            memory_size=memory_mb,
            reserved_concurrent_executions=reserved_concurrency,
            environment_encryption=shared.key,  # the policy and resource names, encrypted with the project key
            tracing=lambda_.Tracing.ACTIVE,
            logging_format=lambda_.LoggingFormat.JSON,
            log_group=self.log_group,
            retry_attempts=2,
            max_event_age=Duration.hours(6),
            on_failure=destinations.SqsDestination(self.dlq),
            environment={
                "GOVERNOR_FUNCTION": name,
                "GOVERNOR_POLICY": policy_subset(policy, capability.environment_sections, name),
                "LEDGER_TABLE": shared.ledger.table_name,
                "IDEMPOTENCY_TABLE": shared.idempotency.table_name,
                "BUS_NAME": shared.bus.event_bus_name,
                "DLQ_URL": self.dlq.queue_url,
                "POWERTOOLS_SERVICE_NAME": "gpu-fleet-governor",
                "POWERTOOLS_METRICS_NAMESPACE": "GpuFleetGovernor",
                **(environment or {}),
            },
        )
        # The shared runtime's grants (governor.capability.BASE_PERMISSIONS), each on this stack's own resource.
        ledger = shared.ledger.table_arn
        self.add_statement(LEDGER, [ledger, f"{ledger}/index/by-kind", f"{ledger}/index/by-target"])
        self.add_statement(IDEMPOTENCY, [shared.idempotency.table_arn])
        self.add_statement(BUS, [shared.bus.event_bus_arn])
        self.add_statement(DLQ, [self.dlq.queue_arn])
        self.add_statement(KMS, [shared.key.key_arn])
        stack = Stack.of(self)
        log_group_id = stack.resolve(stack.get_logical_id(self.log_group.node.default_child))  # type: ignore[arg-type]
        acknowledge(
            self.role,
            f"AwsSolutions::AwsSolutions-IAM5[Resource::<{log_group_id}.Arn>:log-stream:*]",
            "Lambda names its log streams at run time; the grant is limited to streams of this function's own group.",
        )
        for family in ("GenerateDataKey*", "ReEncrypt*"):
            acknowledge(
                self.role,
                f"AwsSolutions::AwsSolutions-IAM5[Action::kms:{family}]",
                "Added by CDK's SQS on-failure destination grant, on the project key's ARN only, so Lambda can "
                "write failed invocations to this function's KMS-encrypted DLQ.",
            )
        acknowledge(
            self.role,
            "AwsSolutions::AwsSolutions-IAM5[Resource::*]",
            "Only X-Ray PutTraceSegments/PutTelemetryRecords (active tracing) use '*': X-Ray has no resource-level "
            "permissions. Unscoped capability statements live in separate policies with their own reasons.",
        )
        self._alarms(shared)

    def _alarms(self, shared: SharedResources) -> None:
        alert(
            self,
            "Errors",
            self.function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
            f"governor {self.name}: invocations failed (each is retried, then parked in the DLQ)",
            shared,
        )
        alert(
            self,
            "DlqDepth",
            self.dlq.metric_approximate_number_of_messages_visible(period=Duration.minutes(5), statistic="Maximum"),
            f"governor {self.name}: events are waiting in the DLQ (governor dlq list {self.name})",
            shared,
        )
        if self.capability.in_progress_seconds is not None:  # time-bound: a parked event is a missed deadline
            # Counted when parked, not while waiting: a replay that empties the queue does not clear what happened.
            alert(
                self,
                "TimeBoundParked",
                self.dlq.metric_number_of_messages_sent(period=Duration.minutes(5), statistic="Sum"),
                f"governor {self.name}: a time-bound event was parked (its deadline may have passed); "
                f"runbook: docs/reliability.md, 'Runbook' ({self.name} parked)",
                shared,
            )

    def declared(self, actions: Iterable[str]) -> list[str]:
        """The actions, sorted, once each; an action the registry does not list for this function stops the synth."""
        wanted = sorted(set(actions))
        extra = [action for action in wanted if action not in self.allowed]
        if extra:
            raise UndeclaredPermission(
                f"the {self.name} function would grant {', '.join(extra)}, which its registry entry does not list "
                "(governor/registry.py: an adapter's IAM_ACTIONS or a typed action's permissions)"
            )
        return wanted

    def add_statement(
        self,
        actions: Iterable[str],
        resources: Sequence[str],
        conditions: dict[str, object] | None = None,
        *,
        reason: str | None = None,
    ) -> None:
        """Grant registered ``actions`` on ``resources`` (and conditions), and nothing else.

        With ``reason``, every wildcard resource of the statement is acknowledged for cdk-nag (AwsSolutions-IAM5)
        with it: the grant and the reason it is safe are written in one call.
        """
        self.role.add_to_policy(
            iam.PolicyStatement(actions=self.declared(actions), resources=list(resources), conditions=conditions)
        )
        if reason is not None:
            for resource in resources:
                if "*" in str(Stack.of(self).resolve(resource)):
                    self.acknowledge_wildcard(resource, reason)

    def acknowledge_wildcard(self, resource: str, reason: str) -> None:
        """Acknowledge AwsSolutions-IAM5 for a wildcard ``resource`` on this role, named the way cdk-nag names it."""
        acknowledge(self.role, f"AwsSolutions::AwsSolutions-IAM5[Resource::{nag_resource(self, resource)}]", reason)

    def add_unscoped_statement(self, construct_id: str, actions: Iterable[str], reason: str) -> None:
        """Registered actions AWS cannot scope to a resource (``Describe*``-style reads), in their own acknowledged
        policy."""
        policy = iam.Policy(
            self,
            construct_id,
            statements=[iam.PolicyStatement(actions=self.declared(actions), resources=["*"])],
        )
        self.role.attach_inline_policy(policy)
        acknowledge(policy, "AwsSolutions::AwsSolutions-IAM5[Resource::*]", reason)

    def _scheduler_role(self) -> iam.Role:
        """EventBridge Scheduler's role: invoke this function (no versions or aliases) and write its DLQ."""
        if self._schedule_role is None:
            self._schedule_role = iam.Role(
                self,
                "SchedulerRole",
                assumed_by=iam.ServicePrincipal(
                    "scheduler.amazonaws.com",
                    conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
                ),
                description=f"EventBridge Scheduler invoking the governor {self.name} function",
            )
            self._schedule_role.add_to_policy(
                iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.function.function_arn])
            )
            stack = Stack.of(self)
            function_id = stack.resolve(stack.get_logical_id(self.function.node.default_child))  # type: ignore[arg-type]
            acknowledge(
                self._schedule_role,
                f"AwsSolutions::AwsSolutions-IAM5[Resource::<{function_id}.Arn>:*]",
                "CDK's Scheduler LambdaInvoke target also grants the function's qualified ARNs (versions, aliases) "
                "of this one function; nothing else.",
            )
            self._schedule_role.add_to_policy(
                iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[self.dlq.queue_arn])
            )
            self._schedule_role.add_to_policy(
                iam.PolicyStatement(
                    actions=["kms:Decrypt", "kms:GenerateDataKey"], resources=[self._shared.key.key_arn]
                )
            )
        return self._schedule_role

    def rule_target(self) -> targets.LambdaFunction:
        """An EventBridge target that parks undeliverable events in this function's DLQ."""
        return targets.LambdaFunction(
            self.function, dead_letter_queue=self.dlq, retry_attempts=4, max_event_age=Duration.hours(2)
        )

    def on_events(self, construct_id: str, pattern: events.EventPattern, description: str) -> events.Rule:
        """A default-bus rule routing ``pattern`` to this function."""
        rule = events.Rule(self, construct_id, event_pattern=pattern, description=description)
        rule.add_target(self.rule_target())
        self.triggers.append(f"EventBridge rule: {description}")
        self.event_patterns.append((construct_id, pattern, description))
        return rule

    def on_schedule(
        self, construct_id: str, expression: str, description: str, payload: dict[str, object] | None = None
    ) -> scheduler.Schedule:
        """An EventBridge Scheduler schedule invoking this function; undeliverable invocations go to its DLQ.

        The payload is shaped like a Scheduled Event so handlers parse it with the same envelope.
        """
        body = {
            "version": "0",
            "id": "<aws.scheduler.execution-id>",
            "detail-type": "Scheduled Event",
            "source": "aws.scheduler",
            "account": Stack.of(self).account,
            "time": "<aws.scheduler.scheduled-time>",
            "region": Stack.of(self).region,
            "resources": ["<aws.scheduler.schedule-arn>"],
            "detail": payload or {},
        }
        schedule = scheduler.Schedule(
            self,
            construct_id,
            description=description,
            schedule=scheduler.ScheduleExpression.expression(expression),
            key=self._shared.key,
            target=scheduler_targets.LambdaInvoke(
                self.function,
                role=self._scheduler_role(),
                dead_letter_queue=self.dlq,
                retry_attempts=2,
                max_event_age=Duration.hours(1),
                input=scheduler.ScheduleTargetInput.from_object(body),
            ),
        )
        self.triggers.append(f"schedule {expression}: {description}")
        return schedule


def alert(
    scope: Construct,
    construct_id: str,
    metric: cloudwatch.Metric,
    description: str,
    shared: SharedResources,
    *,
    threshold: float = 1,
) -> cloudwatch.Alarm:
    """An alarm to the alerts topic when ``metric`` reaches ``threshold`` in one period (no data is no alarm)."""
    alarm = metric.create_alarm(
        scope,
        construct_id,
        alarm_description=description,
        threshold=threshold,
        evaluation_periods=1,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    alarm.add_alarm_action(cw_actions.SnsAction(shared.alerts))
    return alarm


def successful_calls(
    sources: Sequence[str], event_names: Sequence[str], *, event_source: str | None = None, **detail: object
) -> events.EventPattern:
    """CloudTrail API calls (as EventBridge delivers them) named ``event_names`` that succeeded; ``detail`` narrows
    them further. A call with an errorCode changed nothing: it must not invoke (and bill) a function."""
    return events.EventPattern(
        source=list(sources),
        detail_type=[CLOUDTRAIL_DETAIL_TYPE],
        detail={
            **({"eventSource": [event_source]} if event_source else {}),
            "eventName": list(event_names),
            "errorCode": [{"exists": False}],
            **detail,
        },
    )


class CapabilityArgs(TypedDict):
    """What the stack hands every capability construct."""

    shared: SharedResources
    policy: Policy
    settings: Settings
    #: Every function built so far, by capability name; each construct adds its own.
    functions: dict[str, GovernorFunction]
    #: The audit lake (``infra.constructs.audit.AuditLake``) when this region's stack holds it, else None.
    audit: NotRequired[Any]


class FunctionOptions(TypedDict, total=False):
    """Per-construct arguments of its function that depend on the policy or on other functions."""

    reserved_concurrency: int | None
    environment: dict[str, str]


class CapabilityConstruct(Construct):
    """One registered capability's construct: its function is built from the registry entry the same way for every
    capability and registered in ``functions`` under the capability's name; subclasses add triggers and grants.

    A subclass names its registry entry (``CAPABILITY``), the function's construct id (part of every logical id below
    it), timeout and memory as class attributes, and overrides :meth:`function_options` for what depends on the policy.
    """

    CAPABILITY: ClassVar[Capability]
    FUNCTION_ID: ClassVar[str] = "Function"
    TIMEOUT: ClassVar[Duration] = Duration.minutes(5)
    MEMORY_MB: ClassVar[int] = 512
    #: (bytes, why): the function's code asset plus its layers, unzipped, stay within this; the synth refuses more
    #: (``infra.constructs.layer.function_layers``, on the sizes ``make layer`` measured). None: Lambda's 250 MB.
    UNZIPPED_BUDGET: ClassVar[tuple[int, str] | None] = None

    def __init__(self, scope: Construct, construct_id: str, **args: Unpack[CapabilityArgs]) -> None:
        super().__init__(scope, construct_id)
        #: What people's operator roles (gpu-admin, auditor: ``infra.constructs.operators``) read whole, with why:
        #: what the capability keeps for people to read (the reports archive). A subclass adds its buckets.
        self.operator_reads: list[OperatorRead] = []
        self.capability = self.CAPABILITY
        self.shared = args["shared"]
        self.policy = args["policy"]
        self.settings = args["settings"]
        self.function = GovernorFunction(
            self,
            self.FUNCTION_ID,
            capability=self.capability,
            shared=self.shared,
            policy=self.policy,
            settings=self.settings,
            timeout=self.TIMEOUT,
            memory_mb=self.MEMORY_MB,
            unzipped_budget=self.UNZIPPED_BUDGET,
            **self.function_options(args["functions"]),
        )
        args["functions"][self.capability.name] = self.function

    @classmethod
    def in_member_account(cls, scope: Construct, policy: Policy, role: iam.IRole | None) -> None:
        """What the capability deploys into every member account and region (organisation mode's spoke stack,
        ``scope``) beside its execution role there (``role``; None when the capability holds no grants there).
        Nothing unless a subclass says so; called for every registry entry that acts in ``member_accounts``."""

    def function_options(self, functions: dict[str, GovernorFunction]) -> FunctionOptions:
        """Reserved concurrency and extra environment of the function (none unless a subclass says so)."""
        return {}

    def on_rule(self, trigger_id: str, pattern: events.EventPattern) -> events.Rule:
        """The registry entry's rule trigger ``trigger_id``: a default-bus rule of that id, with its description."""
        return self.function.on_events(trigger_id, pattern, self.capability.trigger(trigger_id).text)

    def on_findings(self, trigger_id: str, description: str) -> events.Rule:
        """The registry entry's bus trigger ``trigger_id``: every governor finding on the governor bus, to this
        function (a rule on the project's bus, of that id, with ``description``)."""
        rule = events.Rule(
            self,
            trigger_id,
            event_bus=self.shared.bus,
            event_pattern=events.EventPattern(source=[FINDING_SOURCE], detail_type=[FINDING_DETAIL_TYPE]),
            description=description,
        )
        rule.add_target(self.function.rule_target())
        self.function.triggers.append(self.capability.trigger(trigger_id).line(self.policy))
        return rule

    def on_schedule(self, trigger_id: str, payload: dict[str, object] | None = None) -> scheduler.Schedule:
        """The registry entry's schedule trigger ``trigger_id``, at the expression the policy sets for it."""
        trigger = self.capability.trigger(trigger_id)
        return self.function.on_schedule(trigger_id, trigger.expression(self.policy), trigger.text, payload)

    def add_adapter_reads(self, reason: str, also: Iterable[str] = ()) -> None:
        """The reads of the adapters the registry lists for this capability (``uses``), plus ``also``, in the one
        acknowledged "Reads" policy: AWS supports no resource-level permissions for them. A read AWS does scope
        (``SCOPED_READS``) is granted on this account's resources of its type instead."""
        reads = [action for use in self.capability.uses for action in use.permissions(self.policy)]
        stack = Stack.of(self)
        for action, (service, resource, why) in SCOPED_READS.items():
            if action in reads:
                reads.remove(action)
                arn = stack.format_arn(service=service, resource=resource, resource_name="*")
                self.function.add_statement([action], [arn], reason=why)
        self.function.add_unscoped_statement("Reads", [*reads, *also], reason)


class OperatorRead(NamedTuple):
    """A bucket the operator roles read whole, and why (the acknowledgement of its wildcard object grant)."""

    bucket: s3.IBucket
    why: str


def construct_class(capability: Capability) -> type[CapabilityConstruct]:
    """The CDK construct a registry entry names (``construct``: ``module:Class``), imported only at synth."""
    module, _, name = capability.construct.partition(":")
    found = getattr(import_module(module), name)
    if not (isinstance(found, type) and issubclass(found, CapabilityConstruct)):
        raise TypeError(f"{capability.name}: construct {capability.construct!r} is not a CapabilityConstruct")
    return found


#: Adapter reads AWS scopes to a resource type (Service Authorization Reference): action -> (service, resource type,
#: why any resource of that type in the account is the narrowest grant).
SCOPED_READS = {
    "sagemaker:ListClusterNodes": (
        "sagemaker",
        "cluster",
        "HyperPod clusters are created after deploy; the idle sweep lists every cluster's nodes so that no node is "
        "ever stopped through EC2 (read only).",
    ),
}


def nag_resource(scope: Construct, resource: str) -> str:
    """How cdk-nag writes a resource in a finding id (``infra.nag.nag_name``)."""
    return nag_name(scope, resource)


def _retention(days: int) -> logs.RetentionDays:
    """The shortest CloudWatch Logs retention that keeps at least ``days``."""
    by_days = {
        1: logs.RetentionDays.ONE_DAY,
        7: logs.RetentionDays.ONE_WEEK,
        14: logs.RetentionDays.TWO_WEEKS,
        30: logs.RetentionDays.ONE_MONTH,
        90: logs.RetentionDays.THREE_MONTHS,
        180: logs.RetentionDays.SIX_MONTHS,
        365: logs.RetentionDays.ONE_YEAR,
        731: logs.RetentionDays.TWO_YEARS,
        1827: logs.RetentionDays.FIVE_YEARS,
    }
    return next((by_days[d] for d in sorted(by_days) if d >= days), logs.RetentionDays.TEN_YEARS)
