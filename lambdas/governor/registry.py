"""Every capability the governor deploys, declared once: one :class:`Capability` per Lambda function.

The stack builds one function per entry, each role's actions come from :meth:`Capability.permissions` (constructs add
only resources and conditions), and ``validate``, the demo, the synth summary and the tests iterate over
:data:`REGISTRY` instead of keeping lists of their own. Runtime package: nothing here imports ``infra`` or CDK.

A permission comes from one of three places: the shared runtime (:data:`BASE_PERMISSIONS`, every function), an
adapter a capability uses (its module's ``IAM_ACTIONS``: reads and deliveries), or a typed action it can return
(``governor.domain.actions``: what carrying that action out calls). Adding one is a one-line change in that place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from governor.adapters import bus, capacity, cost_explorer, dlq, ec2, hyperpod, ledger, organization, ses, ssm
from governor.adapters.bus import DETAIL_TYPE, SOURCE
from governor.domain.actions import (
    Action,
    Checkpoint,
    CompleteLifecycleAction,
    DeactivateAccessKey,
    Deregister,
    EnableKeyRotation,
    Notify,
    Record,
    RemovePublicIp,
    Replace,
    RevokeIngress,
    RotateKey,
    SetSecretRotation,
    Stop,
    Tag,
    Terminate,
    Untag,
    Warn,
)
from governor.idle import metrics as cloudwatch
from governor.idle.kubernetes import container_insights, prometheus
from governor.interactions import slack_calls as slack_app
from governor.keys import iam_keys, kms, secrets
from governor.lifecycle import pricing
from governor.network import addresses as network_addresses
from governor.network import security_groups
from governor.network.events import EVENT_NAMES
from governor.notifier import slack
from governor.policy import Policy
from governor.report import archive, athena
from governor.report import chart_image as chart
from governor.spot import domain as spot_domain

# --- the shared runtime: granted to every function by infra/constructs/function.py ----------------------------

#: Writing the function's own log group (Lambda's JSON logs).
LOGS = frozenset({"logs:CreateLogStream", "logs:PutLogEvents"})
#: The decision ledger (``governor.adapters.ledger``), its table and the by-kind index.
LEDGER = ledger.IAM_ACTIONS
#: Powertools idempotency records on the event id.
IDEMPOTENCY = frozenset({"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"})
#: Findings on the governor bus, and rejected events parked in the function's own DLQ.
BUS = bus.IAM_ACTIONS
DLQ = dlq.IAM_ACTIONS
#: The project key, for the encrypted ledger, bus, DLQ and environment.
KMS = frozenset({"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"})
#: Added by CDK itself: the SQS on-failure destination grant (queue attributes, the key's wildcard data-key and
#: re-encrypt actions) and active X-Ray tracing.
CDK_ADDED = frozenset(
    {
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
        "kms:GenerateDataKey*",
        "kms:ReEncrypt*",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
    }
)
BASE_PERMISSIONS = LOGS | LEDGER | IDEMPOTENCY | BUS | DLQ | KMS | CDK_ADDED
#: Organisation mode only (deploy-time ``organization`` context): a function that acts in member accounts assumes
#: the spoke role there (``adapters.aws.ClientCache``); infra/constructs/organization.py scopes it to that role.
ORGANIZATION = frozenset({"sts:AssumeRole"})
#: Organisation mode, sweeping functions only (``fans_out``): list the OUs' accounts, enqueue one sweep target per
#: account and region on the function's own queue, and consume it (``governor.fanout``, ``adapters.organization``).
FANOUT = organization.IAM_ACTIONS

TriggerKind = Literal["rule", "schedule", "bus", "url"]


@dataclass(frozen=True)
class Trigger:
    """What invokes a function, in the words the synth summary prints; the construct builds the rule or schedule."""

    id: str
    kind: TriggerKind
    description: str
    #: For a schedule, the policy field holding its expression, as ``section.field``.
    schedule: str | None = None
    #: Only under this policy condition (the Slack endpoint exists only while buttons are on); None: always.
    when: Callable[[Policy], bool] | None = None

    def expression(self, policy: Policy) -> str:
        section, name = str(self.schedule).split(".")
        return str(getattr(getattr(policy, section), name))

    def line(self, policy: Policy) -> str:
        if self.kind == "rule":
            return f"EventBridge rule: {self.description}"
        if self.kind == "schedule":
            return f"schedule {self.expression(policy)}: {self.description}"
        if self.kind == "bus":
            return f"governor bus rule: {self.description}"
        return self.description


@dataclass(frozen=True)
class Uses:
    """An adapter module a capability calls, with the IAM actions those calls take (only ``when`` the policy says)."""

    adapter: str
    iam: frozenset[str]
    when: Callable[[Policy], bool] | None = None

    def permissions(self, policy: Policy) -> frozenset[str]:
        return self.iam if self.when is None or self.when(policy) else frozenset()


@dataclass(frozen=True)
class Capability:
    """One function: its policy section, handler, triggers, adapters and the typed actions it can return."""

    name: str
    section: str
    description: str
    triggers: tuple[Trigger, ...]
    uses: tuple[Uses, ...]
    actions: tuple[type[Action], ...]
    #: Policy sections the function reads, beyond ``fleet`` and ``ledger`` (its environment holds only these).
    sections: tuple[str, ...] = ()
    #: Action types another function carries out (their permissions are not this function's).
    delegated: frozenset[str] = frozenset()
    #: How the function behaves when its section enforces, and when it does not.
    modes: tuple[str, str] = ("ENFORCING", "report-only")
    enforcing: Callable[[Policy], bool] | None = None
    #: Acts on resources in member accounts in organisation mode (through the spoke role; the spoke grants it).
    member_accounts: bool = False
    #: Its scheduled sweep runs once per account and region in organisation mode (``governor.fanout``).
    fans_out: bool = False
    #: Time-bound (a deadline such as Spot's two-minute warning): an in-progress idempotency record lapses after this
    #: many seconds instead of at the function's timeout, and a parked event raises its own alarm.
    in_progress_seconds: int | None = None

    @property
    def package(self) -> str:
        """The capability's package: ``handler`` (the Lambda entry), ``domain`` (pure decisions) and its adapters."""
        return f"governor.{self.name}"

    @property
    def handler(self) -> str:
        return f"{self.module}.lambda_handler"

    @property
    def module(self) -> str:
        return f"{self.package}.handler"

    @property
    def domain(self) -> str:
        return f"{self.package}.domain"

    @property
    def explains(self) -> str:
        """Where the capability's explainers register: its ``explain`` module if it has one, else ``domain``."""
        from importlib.util import find_spec

        own = f"{self.package}.explain"
        return own if find_spec(own) is not None else self.domain

    @property
    def adapters(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(use.adapter for use in self.uses))

    @property
    def environment_sections(self) -> tuple[str, ...]:
        return self.sections or (self.section,)

    def permissions(self, policy: Policy, *, organization: bool = False) -> frozenset[str]:
        """Every IAM action this function's role needs under ``policy``, beyond :data:`BASE_PERMISSIONS`
        (plus :data:`ORGANIZATION` when deployed as an organisation hub and the function acts in member accounts, and
        :data:`FANOUT` when its sweep fans out there)."""
        found: set[str] = set(ORGANIZATION) if organization and self.member_accounts else set()
        if organization and self.fans_out:
            found |= FANOUT
        for use in self.uses:
            found |= use.permissions(policy)
        for action in self.actions:
            if action.model_fields["type"].default not in self.delegated:
                found |= action.permissions(policy)
        return frozenset(found)

    def enforces(self, policy: Policy) -> bool:
        if self.enforcing is not None:
            return self.enforcing(policy)
        return bool(getattr(getattr(policy, self.section), "enforce", False))

    def mode(self, policy: Policy) -> str:
        """What the function does under ``policy``, as the synth summary and ``validate`` print it."""
        return self.modes[0] if self.enforces(policy) else self.modes[1]

    def trigger(self, trigger_id: str) -> Trigger:
        return next(t for t in self.triggers if t.id == trigger_id)

    def trigger_lines(self, policy: Policy) -> list[str]:
        return [t.line(policy) for t in self.triggers if t.when is None or t.when(policy)]


class Registry(Mapping[str, Capability]):
    """Capabilities by function name, in the order the stack builds them."""

    def __init__(self, *capabilities: Capability) -> None:
        self._by_name = {c.name: c for c in capabilities}

    def __getitem__(self, name: str) -> Capability:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def sections(self) -> tuple[str, ...]:
        """Policy sections with an ``enforce`` switch: every capability's, then the audit lake's (no function)."""
        return (*dict.fromkeys(c.section for c in self.values()), *NON_FUNCTION_SECTIONS)


#: Policy sections with an ``enforce`` switch but no function: the audit lake (Athena, Glue and the trail).
NON_FUNCTION_SECTIONS = ("audit",)

_DESCRIBE = Uses("governor.adapters.ec2", ec2.IAM_ACTIONS)
_CHECKPOINT_STATUS = Uses("governor.adapters.ssm", ssm.IAM_ACTIONS)


def _has_sender(policy: Policy) -> bool:
    return bool(policy.notifications.email_sender)


_DELIVERY = (
    Uses("governor.notifier.slack", slack.IAM_ACTIONS),
    Uses("governor.adapters.ses", ses.IAM_ACTIONS, when=_has_sender),
)


def _keys_enforcing(policy: Policy) -> bool:
    return any(policy.keys.enforces(kind) for kind in ("kms", "access_keys", "secrets"))


REGISTRY = Registry(
    Capability(
        name="lifecycle",
        member_accounts=True,
        fans_out=True,
        section="lifecycle",
        description="Tags GPU launches with their creator and keeps GPU usage sessions for cost attribution",
        triggers=(
            Trigger("RunInstances", "rule", "successful RunInstances of GPU families (CloudTrail)"),
            Trigger(
                "GovernorTags",
                "rule",
                "CreateTags setting an exemption, snooze, checkpoint name or idle mark (CloudTrail): who and when",
            ),
            Trigger("StateChange", "rule", "EC2 instance running / stopping / stopped / shutting-down / terminated"),
            Trigger(
                "Reconcile",
                "schedule",
                "close usage sessions of vanished instances, open sessions for running GPU instances never seen "
                "starting",
                schedule="lifecycle.reconcile_schedule",
            ),
        ),
        uses=(
            _DESCRIBE,
            Uses("governor.lifecycle.pricing", pricing.IAM_ACTIONS, when=lambda p: p.lifecycle.use_price_list_api),
        ),
        actions=(Tag, Record, Notify),
    ),
    Capability(
        name="keys",
        member_accounts=True,
        fans_out=True,
        section="keys",
        description="Keeps KMS keys, IAM access keys and secrets rotated within the keys policy",
        triggers=(
            Trigger(
                "Sweep",
                "schedule",
                "daily sweep of KMS keys, IAM access keys (credential report) and secrets",
                schedule="keys.schedule",
            ),
            Trigger(
                "CloudTrailCalls",
                "rule",
                "Successful KMS, IAM (us-east-1 only) and Secrets Manager calls that change rotation or credentials",
            ),
        ),
        uses=(
            Uses("governor.keys.kms", kms.IAM_ACTIONS),
            Uses("governor.keys.iam_keys", iam_keys.IAM_ACTIONS),
            Uses("governor.keys.secrets", secrets.IAM_ACTIONS),
        ),
        actions=(EnableKeyRotation, RotateKey, DeactivateAccessKey, SetSecretRotation, Notify),
        enforcing=_keys_enforcing,
    ),
    Capability(
        name="spot",
        member_accounts=True,
        section="spot",
        description="Spot interruptions: checkpoint within the two-minute warning, record, notify, relaunch",
        triggers=(
            Trigger(
                "Interruption",
                "rule",
                "EC2 Spot and capacity-reservation interruption warnings, Capacity Block expiry warnings, rebalance "
                "recommendations",
            ),
            Trigger("StateChange", "rule", "EC2 instance stopped / terminated (completes interruption records)"),
            Trigger(
                "CheckpointStatus",
                "rule",
                "SSM Run Command finished (checkpoint status; releases held Auto Scaling lifecycle actions)",
            ),
        ),
        uses=(_DESCRIBE, _CHECKPOINT_STATUS, Uses("governor.spot.recovery", frozenset())),
        actions=(Checkpoint, Deregister, CompleteLifecycleAction, Replace, Record, Notify),
        in_progress_seconds=spot_domain.IN_PROGRESS_SECONDS,
    ),
    Capability(
        name="idle",
        member_accounts=True,
        fans_out=True,
        section="idle",
        description="Warns about, then stops or terminates, GPU instances idle by every signal (idle policy)",
        triggers=(
            Trigger(
                "Sweep",
                "schedule",
                "idle sweep: GPU metrics of every running GPU instance, then warn, act or hold back",
                schedule="idle.schedule",
            ),
        ),
        uses=(
            _DESCRIBE,
            Uses("governor.idle.metrics", cloudwatch.IAM_ACTIONS),
            Uses("governor.adapters.capacity", capacity.IAM_ACTIONS),
            Uses("governor.adapters.hyperpod", hyperpod.IAM_ACTIONS),
            # An EKS cluster's own metrics: Amazon Managed Prometheus (query only) or Container Insights.
            Uses(
                "governor.idle.kubernetes.prometheus",
                prometheus.IAM_ACTIONS,
                when=lambda policy: any(c.metric_source == "prometheus" for c in policy.idle.clusters),
            ),
            Uses(
                "governor.idle.kubernetes.container_insights",
                container_insights.IAM_ACTIONS,
                when=lambda policy: any(c.metric_source == "container_insights" for c in policy.idle.clusters),
            ),
            _CHECKPOINT_STATUS,
            Uses("governor.idle.autoscaling", frozenset()),
        ),
        actions=(Tag, Untag, Warn, Notify, Checkpoint, Stop, Terminate),
    ),
    Capability(
        name="interactions",
        section="interactions",
        description="Slack buttons: Keep, Keep until tomorrow, Stop now, Acknowledge (verified, authorised)",
        triggers=(
            Trigger(
                "FunctionUrl",
                "url",
                "Function URL (auth NONE; every request must carry Slack's v0 signature)",
                when=lambda policy: policy.interactions.buttons,  # no public endpoint while buttons are off
            ),
        ),
        uses=(
            _DESCRIBE,
            Uses("governor.interactions.slack_calls", slack_app.SlackSecrets.IAM_ACTIONS),
            Uses("governor.interactions.slack_calls", slack_app.AsyncInvoker.IAM_ACTIONS),
        ),
        actions=(Tag, Stop, Record),
        delegated=frozenset({"stop"}),  # Stop now is handed to the idle function, which re-checks and stops
    ),
    Capability(
        name="network",
        member_accounts=True,
        fans_out=True,
        section="network",
        description="Revokes offending security-group rules and public IPs on GPU instances (network policy)",
        triggers=(
            Trigger(
                "CloudTrailCalls",
                "rule",
                "EC2 calls that open ingress rules or give instances public addresses: " + ", ".join(EVENT_NAMES),
            ),
            Trigger(
                "DriftSweep",
                "schedule",
                "drift sweep: every security group's ingress rules and every GPU instance's public address",
                schedule="network.sweep_schedule",
            ),
        ),
        uses=(
            _DESCRIBE,
            Uses("governor.network.security_groups", security_groups.IAM_ACTIONS),
            Uses("governor.network.addresses", network_addresses.IAM_ACTIONS),
        ),
        actions=(RevokeIngress, RemovePublicIp, Notify),
    ),
    Capability(
        name="notifier",
        section="notifications",
        description="Findings from the governor bus to Slack and email: routed, merged, within Slack's limits",
        triggers=(Trigger("Findings", "bus", f"{SOURCE} / {DETAIL_TYPE}"),),
        uses=_DELIVERY,
        actions=(Notify,),
        sections=("notifications", "interactions"),
        modes=("DELIVERS to Slack and email", "report-only: logs what it would send"),
    ),
    Capability(
        name="report",
        section="reports",
        description="Daily and weekly security and cost report: Athena queries, ledger, chart, S3 archive",
        triggers=(
            Trigger("Daily", "schedule", "daily security and cost report", schedule="reports.daily_schedule"),
            Trigger("Weekly", "schedule", "weekly security and cost report", schedule="reports.weekly_schedule"),
        ),
        uses=(
            Uses("governor.report.archive", archive.IAM_ACTIONS),
            Uses("governor.report.chart_image", chart.IAM_ACTIONS),
            Uses("governor.report.athena", athena.IAM_ACTIONS | athena.DATA_ACTIONS),
            Uses(
                "governor.adapters.cost_explorer",
                cost_explorer.IAM_ACTIONS,
                when=lambda p: p.lifecycle.effective_rates == "cost_explorer",
            ),
            *_DELIVERY,
        ),
        actions=(Record, Notify),
        sections=("reports", "notifications", "lifecycle", "budgets"),
        modes=("DELIVERS to Slack and email, archives to S3", "report-only: archives to S3, sends nothing"),
    ),
)
