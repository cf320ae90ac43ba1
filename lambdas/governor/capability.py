"""What a capability is: the :class:`Capability` each ``governor.<name>.capability`` module declares, and the
:class:`Registry` of them (``governor.registry`` lists the modules, in the stack's order).

The stack builds one function per capability, each role's actions come from :meth:`Capability.permissions`
(constructs add only resources and conditions), and ``validate``, the demo, the synth summary, the notifier, the report
and the tests ask the registry instead of keeping lists of their own. Runtime package: nothing here imports ``infra``,
CDK or a capability, and a declaration takes only the core policy (:class:`governor.core_policy.CorePolicy`), so the
composed ``Policy`` (``governor.policy``) sits above all of it.

A permission comes from one of three places: the shared runtime (:data:`BASE_PERMISSIONS`, every function), an
adapter a capability uses (its module's ``IAM_ACTIONS``: reads and deliveries), or a typed action it can return (its
class's ``permissions(policy)``: what carrying that action out calls). Adding one is a one-line change in that place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, Union

from governor.adapters import bus, dlq, ledger, organization
from governor.core_policy import CorePolicy, ExemptingTags
from governor.domain.actions import Action
from governor.domain.model import Model
from governor.domain.problems import DEFAULT_FIX, Problem, default_problems

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from governor.domain.costs import FleetSignals, IdleTime
    from governor.domain.decision import Finding

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
#: What one capability may read of another, by role, never by name: ``slack_app`` (the Slack app's bot token and
#: people, :meth:`Registry.slack_app`) and ``sessions`` (the usage sessions' keeper, :meth:`Registry.session_keeper`).
Role = Literal["slack_app", "sessions"]


@dataclass(frozen=True)
class SlackApp:
    """The Slack app every function that talks to people shares: its bot token's secret (posting to a channel,
    ``users.lookupByEmail``, ``users.info``) and the people the policy lists (Slack user id -> email)."""

    bot_token_secret_name: str | None = None
    people: Mapping[str, str] = field(default_factory=dict)

    def bot_token_names(self) -> list[str]:
        """The bot token's secret, when the policy names one."""
        return [self.bot_token_secret_name] if self.bot_token_secret_name else []


@dataclass(frozen=True)
class Trigger:
    """What invokes a function, in the words the synth summary prints; the construct builds the rule or schedule."""

    id: str
    kind: TriggerKind
    description: str
    #: For a schedule, the policy field holding its expression, as ``section.field``.
    schedule: str | None = None
    #: Only under this policy condition (the Slack endpoint exists only while buttons are on); None: always.
    when: Callable[[CorePolicy], bool] | None = None
    #: Names appended to the description, as ``module:ATTRIBUTE`` (read when printed, so the registry loads no
    #: capability module at import).
    lists: str | None = None

    @property
    def text(self) -> str:
        if self.lists is None:
            return self.description
        return self.description + ", ".join(_attribute(self.lists))

    def expression(self, policy: CorePolicy) -> str:
        section, name = str(self.schedule).split(".")
        return str(getattr(getattr(policy, section), name))

    def line(self, policy: CorePolicy) -> str:
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
    when: Callable[[CorePolicy], bool] | None = None

    @property
    def iam(self) -> frozenset[str]:
        found: set[str] = set()
        for name in self.names:
            found |= _attribute(f"{self.adapter}:{name}")
        return frozenset(found)

    def permissions(self, policy: CorePolicy) -> frozenset[str]:
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
    enforcing: Callable[[CorePolicy], bool] | None = None
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
    #: Its sweep flushes stale outbox entries: its own (``"own"``) or every policy's (``"every"``); in organisation
    #: mode the planner flushes those staged outside any target once a round (``governor.fanout``).
    stale_outbox: Literal["own", "every"] | None = None
    #: Its sweep repairs every capability's open act records (``governor.acts.repair``); in organisation mode each
    #: target repairs its own and the planner, once a round, those no target owns (``governor.fanout``).
    repairs_acts: bool = False
    #: The ``policy`` its findings and decisions carry (default: the capability's name).
    finding_policies: tuple[str, ...] = ()
    #: Its findings' messages carry "Acknowledge" (``governor.interactions``).
    acknowledgeable: bool = False
    #: Its findings lose their point in the channel's digest: posted at once under ``immediate: actionable``.
    time_bound: bool = False
    #: Which of its time-bound findings are due: something will happen soon that a person can still change (the
    #: warning of an idle stop that will happen; a report-only one announces nothing). Only these are posted at once
    #: under ``immediate: due``; None: every time-bound finding of it is (a Spot warning: AWS's deadline, not ours).
    due: Callable[[Finding], bool] | None = None
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
    secrets: Callable[[CorePolicy], Iterable[str]] | None = None
    #: Its decisions are about the governed resources, so the report's findings section shows them; False when they
    #: are all about messages (the notifier's deliveries).
    decides_on_resources: bool = True
    #: Its policy section's model (in its own package, or a core one the capability's switch lives in): the composed
    #: ``Policy`` (``governor.policy``) gains the field ``section`` of that model, in the registry's order (YAML shape,
    #: defaults and error paths as for the core sections). None: its section is a core one already.
    section_model: type[Model] | None = None
    #: Its scenarios, as a CLI module path (``governor_cli.demo.capabilities.<name>``): what ``governor demo`` and the
    #: reliability runs do for it (the resources they seed, the events they fire, the cases and their outcomes). A
    #: string the CLI resolves (``governor_cli.demo.hooks``): neither the registry nor the runtime imports it, and the
    #: Lambda code asset does not hold it. Empty: the capability has no scenario of its own.
    demo: str = ""
    #: Its decisions are the fleet's idle GPU time: ``module:IDLE_TIME`` in its own package, a
    #: ``governor.domain.costs.IdleTime`` (how to read them into hours, dollars, energy and chart windows). The report
    #: asks :meth:`Registry.idle_time` for it.
    idle_time: str = ""
    #: What its decisions need the fleet to publish, as ``module:function`` in its own package: ``(policy) ->
    #: governor.domain.costs.FleetSignals`` (the CloudWatch agent's fields, how fresh, EC2's one-minute host
    #: metrics). ``governor cost`` and the report's cost line price it through :meth:`Registry.fleet_signals`.
    fleet_signals: str = ""
    #: It keeps the GPU usage sessions (ledger ``kind="session"``) the report counts spend from and says who owns each
    #: instance: spend in a session nobody owns is raised as its finding (``<policy>.untagged``) unless one of these
    #: problems of its own (``governor.<name>.findings``) already says so. Empty: it keeps no sessions.
    ownership_problems: frozenset[str] = frozenset()

    #: Time-bound (a deadline such as Spot's two-minute warning): an in-progress idempotency record lapses after this
    #: many seconds instead of at the function's timeout, and a parked event raises its own alarm.
    in_progress_seconds: int | None = None
    #: Its findings module, ``governor.<name>.findings``: ``problems(decision, policy)`` (what each warning or critical
    #: decision raises, with its fix) and optionally ``resolves(decision, key)``; the report and the Security Hub export
    #: load it through :meth:`Registry.findings`. Empty: one problem per rule (``governor.domain.problems``).
    findings: str = ""
    #: Checks over the whole policy its section takes part in (its section with the core ones): each raises
    #: ``ValueError`` with the field path; the composed ``Policy`` runs them in registry order.
    checks: tuple[Callable[[CorePolicy], None], ...] = ()
    #: The Slack app it configures (its bot token and people), which the functions that talk to people share
    #: (:meth:`Registry.slack_app`). None: it configures none.
    slack_app: Callable[[CorePolicy], SlackApp] | None = None
    #: The tag its usage sessions record an instance's creator in (the session keeper only), which the report names
    #: when nobody owns spend.
    creator_tag: Callable[[CorePolicy], str] | None = None
    #: The tags its section exempts resources by (``idle.exemptions.tags``): who sets one is recorded as an exemption
    #: (``governor.domain.tagging``, through ``Policy.exempting_tags``). None: its section exempts by no tag.
    exempting_tags: Callable[[CorePolicy], ExemptingTags] | None = None
    #: What it reads of other capabilities, by role: the registry puts the providing capability's section in its
    #: environment and, for ``slack_app``, the bot token among the secrets it reads.
    reads: frozenset[Role] = frozenset()

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

    def action_types(self) -> dict[str, type[Action]]:
        """Its action classes by ``type``."""
        return {action.model_fields["type"].default: action for action in self.actions}

    @property
    def adapters(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(use.adapter for use in self.uses))

    @property
    def loaded_by_name(self) -> tuple[str, ...]:
        """The modules of its package the registry imports by path when asked (findings, buttons, idle time, fleet
        signals): a function reaching the registry can load them, so its code and layers must hold them."""
        named = (self.findings, self.buttons, self.idle_time, self.fleet_signals)
        return tuple(dict.fromkeys(path.partition(":")[0] for path in named if path))

    @property
    def policies(self) -> tuple[str, ...]:
        return self.finding_policies or (self.name,)

    @property
    def environment_sections(self) -> tuple[str, ...]:
        return self.sections or (self.section,)

    def permissions(self, policy: CorePolicy, *, organization: bool = False) -> frozenset[str]:
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

    def enforces(self, policy: CorePolicy) -> bool:
        if self.enforcing is not None:
            return self.enforcing(policy)
        return bool(getattr(getattr(policy, self.section), "enforce", False))

    def mode(self, policy: CorePolicy) -> str:
        """What the function does under ``policy``, as the synth summary and ``validate`` print it."""
        return self.modes[0] if self.enforces(policy) else self.modes[1]

    def secret_names(self, policy: CorePolicy) -> list[str]:
        return sorted(set(self.secrets(policy))) if self.secrets is not None else []

    def trigger(self, trigger_id: str) -> Trigger:
        return next(t for t in self.triggers if t.id == trigger_id)

    def trigger_lines(self, policy: CorePolicy) -> list[str]:
        return [t.line(policy) for t in self.triggers if t.when is None or t.when(policy)]


@cache
def _action_union(classes: tuple[type[Action], ...]) -> TypeAdapter[Any]:
    """The discriminated union of ``classes`` on ``type``, built on first use (no validator at import)."""
    from pydantic import Field, TypeAdapter

    union: Any = Union.__getitem__(classes)
    return TypeAdapter(Annotated[union, Field(discriminator="type")])


def _only(found: list[T], what: str) -> T:
    """The one registered capability's answer: a registry where none or several ``what`` is a declaration error."""
    if len(found) != 1:
        raise LookupError(f"exactly one registered capability must {what}, not {len(found)}")
    return found[0]


class Registry(Mapping[str, Capability]):
    """Capabilities by function name, in the order the stack builds them."""

    def __init__(self, *capabilities: Capability) -> None:
        self._by_name = {c.name: c for c in capabilities}  # as declared: what the wiring looks providers up in
        self._by_name = {c.name: self._wired(c) for c in capabilities}

    def _wired(self, capability: Capability) -> Capability:
        """``capability`` with what it reads of others by role (``reads``) in its environment and its secrets."""
        if not capability.reads:
            return capability
        providers = [self.provider(role) for role in sorted(capability.reads)]
        sections = (*capability.environment_sections, *(p.section for p in providers))
        own = capability.secrets
        if "slack_app" not in capability.reads:
            return replace(capability, sections=tuple(dict.fromkeys(sections)))
        app = self.slack_app

        def secrets(policy: CorePolicy) -> Iterable[str]:
            return (*(own(policy) if own is not None else ()), *app(policy).bot_token_names())

        return replace(capability, sections=tuple(dict.fromkeys(sections)), secrets=secrets)

    def provider(self, role: Role) -> Capability:
        """The one capability providing ``role`` (:data:`Role`)."""
        if role == "sessions":
            return self.session_keeper()
        return _only([c for c in self.values() if c.slack_app is not None], "configure the Slack app")

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

    def secret_names(self, policy: CorePolicy) -> list[str]:
        """Every secret the governor's own functions read under ``policy``."""
        return sorted({name for c in self.values() for name in c.secret_names(policy)})

    def carrying_out(self, kind: str) -> Capability:
        """The capability that carries out actions of type ``kind`` itself: it can return them and does not delegate
        them (Stop now's click is answered by one function and carried out by the one that owns stopping)."""
        doers = [c for c in self.values() if kind in c.action_types() and kind not in c.delegated]
        return _only(doers, f"carry out '{kind}' itself")

    def actions(self) -> dict[str, type[Action]]:
        """Every typed action class a registered capability can return, by its ``type`` (what the ledger, ``explain``
        and the findings call it), in registry order: composed from the declarations as the policy's sections are."""
        found: dict[str, type[Action]] = {}
        for capability in self.values():
            for kind, cls in capability.action_types().items():
                if found.setdefault(kind, cls) is not cls:
                    raise TypeError(f"two action classes of type {kind!r}: {found[kind].__name__}, {cls.__name__}")
        return found

    def parse_action(self, data: Mapping[str, Any]) -> Action:
        """An action written out as a mapping (a ledger item's, a Stop now hand-over) read back into its class by
        ``type``; unknown types and unknown fields are refused (``pydantic.ValidationError``)."""
        parsed: Action = _action_union(tuple(self.actions().values())).validate_python(data)
        return parsed

    def fixing_actions(self) -> frozenset[str]:
        """The action types that fix a problem by themselves when done (``Action.FIXES``): a finding whose enforced
        actions include one is resolved by the governor (the report, the Security Hub export)."""
        return frozenset(kind for kind, cls in self.actions().items() if cls.FIXES)

    def session_keeper(self) -> Capability:
        """The one capability that keeps the usage sessions (``ownership_problems``)."""
        return _only([c for c in self.values() if c.ownership_problems], "keep the usage sessions")

    def slack_app(self, policy: CorePolicy) -> SlackApp:
        """The Slack app under ``policy``, as the one capability configuring it declares it."""
        declared = self.provider("slack_app").slack_app
        assert declared is not None
        return declared(policy)

    def creator_tag(self, policy: CorePolicy) -> str:
        """The tag the session keeper records an instance's creator in."""
        declared = self.session_keeper().creator_tag
        if declared is None:
            raise LookupError(f"{self.session_keeper().name} keeps the usage sessions but declares no creator_tag")
        return declared(policy)

    def findings(self, policy_name: str) -> ModuleType | None:
        """The findings module of the capability whose findings carry ``policy`` ``policy_name``, imported now (the
        report's and the Security Hub export's; no other function loads one)."""
        raising = self.raising(policy_name)
        return import_module(raising.findings) if raising is not None and raising.findings else None

    def problems_of(
        self, decision: Mapping[str, Any], policy: CorePolicy, fallback: str = DEFAULT_FIX
    ) -> list[Problem]:
        """The problems one warning or critical decision raises, in its capability's words (its ``findings``), or one
        per rule with ``fallback`` as the fix when the capability declares no findings module."""
        own = self.findings(str(decision.get("policy")))
        if own is not None:
            return list(own.problems(decision, policy))
        return default_problems(decision, fallback)

    def resolves(self, decision: Mapping[str, Any], key: str) -> bool:
        """Whether a later info-level ``decision`` covers problem ``key`` (the capability may say which problems it
        covers, ``resolves``; by default every one of its resource)."""
        own = self.findings(str(decision.get("policy")))
        return bool(own.resolves(decision, key)) if own is not None and hasattr(own, "resolves") else True

    def checks(self) -> tuple[Callable[[CorePolicy], None], ...]:
        """Every capability's checks over the whole policy, in registry order."""
        return tuple(check for c in self.values() for check in c.checks)

    def recording_idle_time(self) -> Capability:
        """The one capability whose decisions are the fleet's idle GPU time (``idle_time``)."""
        return _only([c for c in self.values() if c.idle_time], "declare idle_time")

    def idle_time(self) -> IdleTime:
        """How to read the fleet's idle GPU time from the ledger: the ``idle_time`` of the one capability that
        declares it (imported now: no function but the report loads it)."""
        found: IdleTime = _attribute(self.recording_idle_time().idle_time)
        return found

    def fleet_signals(self, policy: CorePolicy) -> FleetSignals:
        """What the fleet must publish for the decisions under ``policy``: the one capability's ``fleet_signals``,
        imported now (only ``governor cost`` and the report's cost line ask)."""
        declared = _only([c.fleet_signals for c in self.values() if c.fleet_signals], "declare fleet_signals")
        found: FleetSignals = _attribute(declared)(policy)
        return found


def _has_sender(policy: CorePolicy) -> bool:
    return bool(policy.notifications.email_sender)


#: The adapters of a function that delivers to people (the notifier's findings, the report): Slack always, SES only
#: with a sender.
DELIVERY = (Uses("governor.adapters.slack"), Uses("governor.adapters.ses", when=_has_sender))

#: Policy sections with an ``enforce`` switch but no function: the audit lake (Athena, Glue and the trail).
NON_FUNCTION_SECTIONS = ("audit",)
