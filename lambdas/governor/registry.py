"""Every capability the governor deploys, declared once: one :class:`Capability` per Lambda function.

The stack builds one function per entry, each role's actions come from :meth:`Capability.permissions` (constructs add
only resources and conditions), and ``validate``, the demo, the synth summary and the tests iterate over
:data:`REGISTRY` instead of keeping lists of their own. Runtime package: nothing here imports ``infra`` or CDK.

A permission comes from one of three places: the shared runtime (:data:`BASE_PERMISSIONS`, every function), an
adapter a capability uses (its module's ``IAM_ACTIONS``: reads and deliveries), or a typed action it can return
(``governor.domain.actions``: what carrying that action out calls). Adding one is a one-line change in that place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from governor.adapters import bus, dlq, ledger, organization
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

if TYPE_CHECKING:
    from governor.domain.costs import IdleTime
    from governor.policy import Policy

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

T = TypeVar("T")

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
    #: Names appended to the description, as ``module:ATTRIBUTE`` (read when printed, so the registry loads no
    #: capability module at import).
    lists: str | None = None

    @property
    def text(self) -> str:
        if self.lists is None:
            return self.description
        return self.description + ", ".join(_attribute(self.lists))

    def expression(self, policy: Policy) -> str:
        section, name = str(self.schedule).split(".")
        return str(getattr(getattr(policy, section), name))

    def line(self, policy: Policy) -> str:
        if self.kind == "rule":
            return f"EventBridge rule: {self.text}"
        if self.kind == "schedule":
            return f"schedule {self.expression(policy)}: {self.text}"
        if self.kind == "bus":
            return f"governor bus rule: {self.text}"
        return self.text


def _attribute(path: str) -> Any:
    """``module:a.b`` -> that module's attribute ``a.b``, imported only now."""
    module, _, name = path.partition(":")
    found: Any = import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found


@dataclass(frozen=True)
class Uses:
    """An adapter module a capability calls, with the IAM actions those calls take (only ``when`` the policy says).

    The actions are the module's ``IAM_ACTIONS`` (or the attributes ``names`` lists), read when asked: the registry
    imports no capability module, so every function may consult it at no cost."""

    adapter: str
    names: tuple[str, ...] = ("IAM_ACTIONS",)
    when: Callable[[Policy], bool] | None = None

    @property
    def iam(self) -> frozenset[str]:
        found: set[str] = set()
        for name in self.names:
            found |= _attribute(f"{self.adapter}:{name}")
        return frozenset(found)

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
    #: Its sweep is made of parts (its Scheduled Event's ``detail.kinds``): every part, in order ...
    sweep_parts: tuple[str, ...] = ()
    #: ... and the parts about account-wide resources (IAM is global), swept in the first configured region only.
    account_wide_parts: frozenset[str] = frozenset()
    #: Its sweep keeps per-target circuit breakers, which the organisation-wide breaker counts (``governor.fanout``).
    breakers: bool = False
    #: The ``policy`` its findings and decisions carry (default: the capability's name).
    finding_policies: tuple[str, ...] = ()
    #: Its findings' messages carry "Acknowledge" (``governor.interactions``).
    acknowledgeable: bool = False
    #: Its findings lose their point in the daily digest: posted at once under ``immediate: actionable``.
    time_bound: bool = False
    #: The rules whose findings open an episode about a resource (a warning, or an owner's digest of warnings): with
    #: the Slack bot token, the notifier keeps that message's ``ts`` and later findings about the resource update it
    #: in place (or reply in a digest's thread) instead of posting again. Empty: every finding is a new message.
    episode_starts: frozenset[str] = frozenset()
    #: The rules whose findings withdraw an episode's warning (the resource is no longer judged idle): nothing will be
    #: done, so the notifier never posts them as a message of their own. With the bot token and the episode's ``ts``
    #: it updates the episode's message in place (buttons removed); otherwise they wait for the daily report digest.
    episode_withdrawals: frozenset[str] = frozenset()
    #: Its CDK construct, as ``module:Class`` (the stack imports it; the runtime never does), the construct's id,
    #: and the capability whose construct holds it (None: the stack), which keeps its logical ids where they are.
    construct: str = ""
    construct_id: str = ""
    within: str | None = None
    #: The buttons it answers on the governor's messages, as ``module:function`` in its package: ``(finding, policy,
    #: expires_at) -> governor.domain.messages.Buttons | None``; the notifier attaches them (``interactions``).
    buttons: str = ""
    #: The Secrets Manager secrets its function reads under a policy (Slack webhooks, the Slack app's signing secret
    #: and bot token): its construct grants reading exactly these, and the keys enforcer never touches any of them.
    secrets: Callable[[Policy], Iterable[str]] | None = None
    #: Its decisions are about the governed resources, so the report's findings section shows them; False when they
    #: are all about messages (the notifier's deliveries).
    decides_on_resources: bool = True
    #: Its policy section's model, as ``module:Model`` in its own package, when ``governor.policy`` does not hold it:
    #: ``Policy`` gains the field ``section`` of that model (YAML shape, defaults and error paths as for the others).
    policy_section: str = ""
    #: Its scenarios, as a CLI module path (``governor_cli.demo.capabilities.<name>``): what ``governor demo`` and the
    #: reliability runs do for it (the resources they seed, the events they fire, the cases and their outcomes). A
    #: string the CLI resolves (``governor_cli.demo.hooks``): neither the registry nor the runtime imports it, and the
    #: Lambda code asset does not hold it. Empty: the capability has no scenario of its own.
    demo: str = ""
    #: Its decisions are the fleet's idle GPU time: ``module:IDLE_TIME`` in its own package, a
    #: ``governor.domain.costs.IdleTime`` (how to read them into hours, dollars, energy and chart windows). The report
    #: asks :meth:`Registry.idle_time` for it.
    idle_time: str = ""
    #: It keeps the GPU usage sessions (ledger ``kind="session"``) the report counts spend from and says who owns each
    #: instance: spend in a session nobody owns is raised as its finding (``<policy>.untagged``) unless one of these
    #: problems of its own (``governor.<name>.findings``) already says so. Empty: it keeps no sessions.
    ownership_problems: frozenset[str] = frozenset()

    #: Time-bound (a deadline such as Spot's two-minute warning): an in-progress idempotency record lapses after this
    #: many seconds instead of at the function's timeout, and a parked event raises its own alarm.
    in_progress_seconds: int | None = None

    @property
    def section_model(self) -> type[Any] | None:
        return _attribute(self.policy_section) if self.policy_section else None

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
    def policies(self) -> tuple[str, ...]:
        return self.finding_policies or (self.name,)

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

    def secret_names(self, policy: Policy) -> list[str]:
        return sorted(set(self.secrets(policy))) if self.secrets is not None else []

    def trigger(self, trigger_id: str) -> Trigger:
        return next(t for t in self.triggers if t.id == trigger_id)

    def trigger_lines(self, policy: Policy) -> list[str]:
        return [t.line(policy) for t in self.triggers if t.when is None or t.when(policy)]


def _only(found: list[T], what: str) -> T:
    """The one registered capability's answer: a registry where none or several ``what`` is a declaration error."""
    if len(found) != 1:
        raise LookupError(f"exactly one registered capability must {what}, not {len(found)}")
    return found[0]


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

    def raising(self, policy_name: str) -> Capability | None:
        """The capability whose findings carry ``policy`` ``policy_name``."""
        return next((c for c in self.values() if policy_name in c.policies), None)

    def policies_where(self, flag: Callable[[Capability], bool]) -> frozenset[str]:
        """The finding policies of every capability ``flag`` holds for."""
        return frozenset(p for c in self.values() if flag(c) for p in c.policies)

    def button_makers(self) -> tuple[Callable[..., Any], ...]:
        """The functions making a message's buttons, one per capability that answers clicks (``buttons``), imported
        only now."""
        return tuple(_attribute(c.buttons) for c in self.values() if c.buttons)

    def secret_names(self, policy: Policy) -> list[str]:
        """Every secret the governor's own functions read under ``policy``."""
        return sorted({name for c in self.values() for name in c.secret_names(policy)})

    def carrying_out(self, action: type[Action]) -> Capability:
        """The capability that carries out ``action`` itself: it can return it and does not delegate it (Stop now's
        click is answered by one function and carried out by the one that owns stopping)."""
        kind = action.model_fields["type"].default
        doers = [c for c in self.values() if action in c.actions and kind not in c.delegated]
        return _only(doers, f"carry out '{kind}' itself")

    def session_keeper(self) -> Capability:
        """The one capability that keeps the usage sessions (``ownership_problems``)."""
        return _only([c for c in self.values() if c.ownership_problems], "keep the usage sessions")

    def idle_time(self) -> IdleTime:
        """How to read the fleet's idle GPU time from the ledger: the ``idle_time`` of the one capability that
        declares it (imported now, so the registry still loads no capability module at import)."""
        found: IdleTime = _attribute(_only([c.idle_time for c in self.values() if c.idle_time], "declare idle_time"))
        return found


#: Policy sections with an ``enforce`` switch but no function: the audit lake (Athena, Glue and the trail).
NON_FUNCTION_SECTIONS = ("audit",)

_DESCRIBE = Uses("governor.adapters.ec2")
_CHECKPOINT_STATUS = Uses("governor.adapters.ssm")


def section_of(policy: Policy, section: str) -> Any:
    """A policy section by name: the sections a capability declares in its package are not attributes type checkers
    know on ``Policy``."""
    return getattr(policy, section)


def _has_sender(policy: Policy) -> bool:
    return bool(policy.notifications.email_sender)


_DELIVERY = (
    Uses("governor.adapters.slack"),
    Uses("governor.adapters.ses", when=_has_sender),
)


def _keys_enforcing(policy: Policy) -> bool:
    return any(policy.keys.enforces(kind) for kind in ("kms", "access_keys", "secrets"))


REGISTRY = Registry(
    Capability(
        name="lifecycle",
        demo="governor_cli.demo.capabilities.lifecycle",
        construct="infra.constructs.lifecycle:Lifecycle",
        construct_id="Lifecycle",
        member_accounts=True,
        fans_out=True,
        ownership_problems=frozenset({"lifecycle.no-team", "lifecycle.launch"}),  # governor.lifecycle.findings
        section="lifecycle",
        policy_section="governor.lifecycle.policy:LifecyclePolicy",
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
            Uses("governor.lifecycle.pricing", when=lambda p: p.pricing.use_price_list_api),
        ),
        actions=(Tag, Record, Notify),
        sections=("lifecycle", "pricing"),  # sessions are priced when they close
    ),
    Capability(
        name="keys",
        demo="governor_cli.demo.capabilities.keys",
        construct="infra.constructs.keys:KeysEnforcer",
        construct_id="Keys",
        acknowledgeable=True,
        sweep_parts=("kms", "access_keys", "secrets"),
        account_wide_parts=frozenset({"access_keys"}),
        member_accounts=True,
        fans_out=True,
        section="keys",
        policy_section="governor.keys.policy:KeysPolicy",
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
            Uses("governor.keys.kms"),
            Uses("governor.keys.iam_keys"),
            Uses("governor.keys.secrets"),
        ),
        actions=(EnableKeyRotation, RotateKey, DeactivateAccessKey, SetSecretRotation, Notify),
        enforcing=_keys_enforcing,
    ),
    Capability(
        name="spot",
        demo="governor_cli.demo.capabilities.spot",
        construct="infra.constructs.spot:Spot",
        construct_id="Spot",
        acknowledgeable=True,
        time_bound=True,
        member_accounts=True,
        section="spot",
        policy_section="governor.spot.policy:SpotPolicy",
        description="Spot interruptions: checkpoint within the two-minute warning, record, notify, relaunch",
        triggers=(
            Trigger(
                "Interruption",
                "rule",
                "EC2 Spot and capacity-reservation interruption warnings, Capacity Block expiry warnings, rebalance "
                "recommendations; Capacity Block delivered, capacity reservation states, lent capacity reclaimed",
            ),
            Trigger("StateChange", "rule", "EC2 instance stopped / terminated (completes interruption records)"),
            Trigger(
                "CheckpointStatus",
                "rule",
                "SSM Run Command finished (checkpoint status; releases held Auto Scaling lifecycle actions)",
            ),
        ),
        # The reservation a capacity event names is read before anything is done about it (issue 45.4).
        uses=(_DESCRIBE, _CHECKPOINT_STATUS, Uses("governor.adapters.capacity"), Uses("governor.spot.recovery", ())),
        actions=(Checkpoint, Deregister, CompleteLifecycleAction, Replace, Record, Notify),
        # The in-progress idempotency record lapses after 40 s, not at the function's 180 s timeout: when the record's
        # write answer is lost, Lambda's first retry (about a minute later) runs within the two-minute warning.
        in_progress_seconds=40,
    ),
    Capability(
        name="idle",
        demo="governor_cli.demo.capabilities.idle",
        construct="infra.constructs.idle:IdleReclamation",
        construct_id="Idle",
        time_bound=True,
        episode_starts=frozenset({"idle.warned", "idle.warned-digest"}),  # governor.idle.digest's two rules
        episode_withdrawals=frozenset({"idle.resumed"}),  # governor.idle.domain.RESUMED
        breakers=True,
        member_accounts=True,
        fans_out=True,
        section="idle",
        policy_section="governor.idle.policy:IdlePolicy",
        idle_time="governor.idle.costs:IDLE_TIME",
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
            Uses("governor.idle.metrics"),
            Uses("governor.adapters.capacity"),
            Uses("governor.adapters.hyperpod"),
            # An EKS cluster's own metrics: Amazon Managed Prometheus (query only) or Container Insights.
            Uses(
                "governor.idle.kubernetes.prometheus",
                when=lambda policy: any(c.metric_source == "prometheus" for c in policy.idle.clusters),
            ),
            Uses(
                "governor.idle.kubernetes.container_insights",
                when=lambda policy: any(c.metric_source == "container_insights" for c in policy.idle.clusters),
            ),
            _CHECKPOINT_STATUS,
            Uses("governor.idle.autoscaling", ()),
        ),
        actions=(Tag, Untag, Warn, Notify, Checkpoint, Stop, Terminate),
        sections=("idle", "pricing"),  # the dearest idle instance acts first; findings carry its hourly price
    ),
    Capability(
        name="interactions",
        demo="governor_cli.demo.capabilities.interactions",
        construct="infra.constructs.interactions:SlackInteractions",
        construct_id="Interactions",
        time_bound=True,
        section="interactions",
        policy_section="governor.interactions.policy:InteractionsPolicy",
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
            Uses("governor.adapters.slack_app", ("SlackSecrets.IAM_ACTIONS",)),
            Uses("governor.interactions.slack_calls", ("AsyncInvoker.IAM_ACTIONS",)),
        ),
        actions=(Tag, Stop, Record),
        delegated=frozenset({"stop"}),  # Stop now is handed to the idle function, which re-checks and stops
        buttons="governor.interactions.domain:message_buttons",
        secrets=lambda policy: policy.interactions.secret_names(),
    ),
    Capability(
        name="network",
        demo="governor_cli.demo.capabilities.network",
        construct="infra.constructs.network:NetworkEnforcer",
        construct_id="Network",
        acknowledgeable=True,
        member_accounts=True,
        fans_out=True,
        section="network",
        policy_section="governor.network.policy:NetworkPolicy",
        description="Revokes offending security-group rules and public IPs on GPU instances (network policy)",
        triggers=(
            Trigger(
                "CloudTrailCalls",
                "rule",
                "EC2 calls that open ingress rules or give instances public addresses: ",
                lists="governor.network.events:EVENT_NAMES",
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
            Uses("governor.network.security_groups"),
            Uses("governor.network.addresses"),
        ),
        actions=(RevokeIngress, RemovePublicIp, Notify),
    ),
    Capability(
        name="notifier",
        demo="governor_cli.demo.capabilities.notifier",
        construct="infra.constructs.notifications:Notifications",
        construct_id="Notifications",
        finding_policies=("notifications",),
        section="notifications",
        policy_section="governor.notifier.policy:NotificationsPolicy",
        description="Findings from the governor bus to Slack and email: routed, merged, within Slack's limits",
        triggers=(Trigger("Findings", "bus", f"{SOURCE} / {DETAIL_TYPE}"),),
        uses=_DELIVERY,
        actions=(Notify,),
        # the webhooks, and the bot token for owners' mentions (users.lookupByEmail) and posts to a channel
        secrets=lambda policy: (*policy.notifications.slack_secret_names(), *policy.interactions.bot_token_names()),
        decides_on_resources=False,
        sections=("notifications", "interactions"),
        modes=("DELIVERS to Slack and email", "report-only: logs what it would send"),
    ),
    Capability(
        name="report",
        demo="governor_cli.demo.capabilities.report",
        construct="infra.constructs.reports:Reports",
        construct_id="Reports",
        within="notifier",
        finding_policies=("reports", "budgets"),
        section="reports",
        policy_section="governor.report.policy:ReportsPolicy",
        description="Daily and weekly security and cost report: Athena queries, ledger, chart, S3 archive",
        triggers=(
            Trigger("Daily", "schedule", "daily security and cost report", schedule="reports.daily_schedule"),
            Trigger("Weekly", "schedule", "weekly security and cost report", schedule="reports.weekly_schedule"),
        ),
        uses=(
            Uses("governor.report.archive"),
            Uses("governor.report.chart_image"),
            Uses("governor.report.athena", ("IAM_ACTIONS", "DATA_ACTIONS")),
            Uses(
                "governor.adapters.cost_explorer",
                when=lambda p: p.pricing.effective_rates in ("cost_explorer", "cur"),
            ),
            Uses("governor.adapters.cur", when=lambda p: p.pricing.effective_rates == "cur"),
            *_DELIVERY,
        ),
        actions=(Record, Notify),
        secrets=lambda policy: policy.notifications.slack_secret_names(),
        sections=("reports", "notifications", "lifecycle", "pricing", "budgets"),
        modes=("DELIVERS to Slack and email, archives to S3", "report-only: archives to S3, sends nothing"),
    ),
    Capability(
        name="securityhub",
        section="securityhub",
        policy_section="governor.securityhub.policy:SecurityHubPolicy",
        construct="infra.constructs.securityhub:SecurityHubExport",
        construct_id="SecurityHub",
        description="Every governor finding as an OCSF Detection Finding and, with asff, in Security Hub (ASFF)",
        triggers=(Trigger("Findings", "bus", f"{SOURCE} / {DETAIL_TYPE}"),),
        uses=(
            Uses("governor.securityhub.hub", when=lambda p: bool(section_of(p, "securityhub").asff)),
            Uses(
                "governor.securityhub.hub",
                ("ARCHIVE_ACTIONS",),
                when=lambda p: bool(section_of(p, "securityhub").ocsf_bucket),
            ),
        ),
        actions=(),
        modes=("EXPORTS OCSF (and ASFF to Security Hub with asff)", "report-only: builds the findings, writes nothing"),
    ),
)
