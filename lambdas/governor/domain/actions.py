"""Typed actions: the base every capability's actions derive from, and the actions several capabilities share.

An action is one class per type, with its own fields and the IAM actions executing it takes. The domain returns
these; handlers read their attributes. ``model_dump`` keeps the shape the ledger, ``explain`` and the findings have
always had: ``type``, ``enforced`` and the fields the domain actually set, in declaration order (an unset optional
field is left out rather than written as ``null``). ``permissions(policy)`` is what the function executing the action
needs beyond the shared runtime (:data:`governor.capability.BASE_PERMISSIONS`); like Cloud Custodian's
``get_permissions()`` it may depend on policy options, and it is empty for actions the runtime itself carries out (a
ledger record, a finding on the bus). Adding a permission is one line in one class.

``execute(aws, at)`` carries one enforced action out through the adapters it is given (``aws``: the capability's
adapter bundle, which each class states as a small ``Protocol``) and returns one :class:`Outcome`; the generic runner
(:mod:`governor.runner`) calls it after re-reading the resource, and ``verify(aws, at)`` after a fixing action.
Nothing here imports boto3: the adapters are passed in, and the at-most-once protocol for ``SendCommand``
(``governor.domain.once``) works on the ledger and commands ports it is handed. Nothing here imports a capability, an
adapter or the runtime (``tests/unit/test_layers.py``).

The actions one capability takes live in its package (``governor.<name>.actions``: stop and terminate in idle,
replace, deregister and the lifecycle hook in Spot, the rotations in keys, ingress and addresses in network), and
its declaration lists them; the registry composes every registered class into one union on ``type``
(:meth:`governor.capability.Registry.actions`), as the policy composes the sections. What stays here is what
several capabilities send: tags, the checkpoint (idle before a stop, Spot within its two-minute warning, through the
same at-most-once ``SendCommand``), and what the runtime carries out itself (record, notify, the idle warning).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from pydantic import ConfigDict, Field, SerializeAsAny, SerializerFunctionWrapHandler, model_serializer

from governor.domain.model import Model
from governor.domain.once import send_command_once
from governor.domain.verification import Verification

if TYPE_CHECKING:
    from governor.core_policy import CorePolicy

_ALWAYS = frozenset({"type", "enforced"})
#: The tag an untag without keys removes (the idle mark's tag; ``governor.idle.domain.IDLE_SINCE_TAG``).
DEFAULT_UNTAG = "governor:idle-since"


@dataclass(frozen=True)
class Outcome:
    """The result of one change: AWS refusing (a limit, a state) is an outcome to report, not a crash.

    ``done`` is the sentence a finding reports as done; ``data`` carries what a capability keeps from the call (a
    checkpoint's command id, the target groups left, a replacement's id); ``verified`` is what the runner's re-read
    after a fixing action saw (:mod:`governor.domain.rereads`), None when nothing was re-read.
    """

    ok: bool
    error_code: str | None = None
    message: str = ""
    done: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    verified: Verification | None = None


@dataclass(frozen=True)
class Acting:
    """What executing an action needs beyond its own fields and the adapters: the event being handled (client tokens,
    at-most-once intents), the resource the decision is about and, when the runner re-read it, its live state."""

    event_id: str
    resource: str
    policy: CorePolicy
    ledger: Any = None  # governor.domain.ports.Ledger: at-most-once intents
    live: Any = None  # the resource as re-read right before acting (a Key, Secret, Instance...)
    label: str = ""  # how a sent command names itself ("idle checkpoint"); part of its at-most-once Comment
    #: What a non-idempotent call is at most once per, when wider than one event: idle sends one checkpoint per idle
    #: spell, across the sweeps (events) of that spell (``None``: per event).
    intent: str | None = None


# --- what executing needs of the adapters (each capability's adapter bundle has these attributes) ----------------


class _InstanceWrites(Protocol):
    def tag(self, resource_id: str, tags: dict[str, str]) -> None: ...

    def untag(self, resource_id: str, keys: Iterable[str]) -> None: ...


class InstanceChanges(Protocol):
    """EC2 instance tags (``adapters.ec2.Ec2Actions``)."""

    @property
    def actions(self) -> _InstanceWrites: ...


class Commands(Protocol):
    """SSM Run Command (``adapters.ssm.SsmCommands``); ``find`` lets a retry look a command up instead of resending."""

    @property
    def commands(self) -> Any: ...


class Action(Model):
    """One thing the governor would do; ``enforced`` is false when the policy is report-only."""

    model_config = ConfigDict(extra="forbid")

    type: str
    enforced: bool = False

    #: IAM actions executing this action takes, whatever the policy says (see :meth:`permissions`).
    IAM: ClassVar[frozenset[str]] = frozenset()
    #: Carried out by the runtime itself (a ledger record, a finding on the bus), not by ``execute``.
    BY_RUNTIME: ClassVar[bool] = False
    #: Fixes the problem by itself when done (warn, notify, record and tag only tell someone): a finding whose enforced
    #: actions include one is resolved by the governor (the report, the Security Hub export), once ``verify`` says so.
    FIXES: ClassVar[bool] = False

    @model_serializer(mode="wrap")
    def _as_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if key in _ALWAYS or key in self.model_fields_set}

    @classmethod
    def permissions(cls, policy: CorePolicy) -> frozenset[str]:
        """The IAM actions the executing function needs for this action under ``policy``."""
        return cls.IAM

    def execute(self, aws: Any, at: Acting) -> Outcome:
        """Carry the action out; the runtime's own actions (record, notify, warn) have nothing to do here."""
        return Outcome(ok=True)

    def verify(self, aws: Any, at: Acting) -> Verification | None:
        """The resource re-read after the action went through (``governor.domain.rereads``): did the problem go
        away? None: the type has no check (it fixes nothing by itself, or its effect cannot be read back)."""
        return None


# --- shared by several capabilities ---------------------------------------------------------------------------


class Tag(Action):
    """Write tags on an instance (and drop the keys in ``remove``, which takes :class:`Untag`'s permission)."""

    type: Literal["tag"] = "tag"
    tags: dict[str, str] = Field(default_factory=dict)
    remove: list[str] | None = None
    IAM = frozenset({"ec2:CreateTags"})

    def execute(self, aws: InstanceChanges, at: Acting) -> Outcome:
        aws.actions.tag(at.resource, self.tags)
        if self.remove:
            aws.actions.untag(at.resource, self.remove)
        return Outcome(ok=True, done=f"tagged {', '.join(f'{k}={v}' for k, v in self.tags.items())}")


class Untag(Action):
    type: Literal["untag"] = "untag"
    keys: list[str] | None = None
    IAM = frozenset({"ec2:DeleteTags"})

    def execute(self, aws: InstanceChanges, at: Acting) -> Outcome:
        keys = self.keys or [DEFAULT_UNTAG]
        aws.actions.untag(at.resource, keys)
        return Outcome(ok=True, done=f"removed {', '.join(keys)}")


class Checkpoint(Action):
    """Run the job's checkpoint command through SSM Run Command, then read its outcome."""

    type: Literal["checkpoint"] = "checkpoint"
    command: str | None = None
    timeout: int | None = None
    source: str | None = None
    timeout_seconds: int | None = None
    name: str | None = None
    blocked: str | None = None
    IAM = frozenset({"ssm:SendCommand"})  # its outcome is read through governor.adapters.ssm
    FIXES = True

    def execute(self, aws: Commands, at: Acting) -> Outcome:
        """At most once per event: the intent is claimed before sending, and a retry looks the command up instead of
        resending it (``governor.domain.once``). ``timeout`` (idle) or ``timeout_seconds`` (Spot) bounds the command."""
        sent = send_command_once(
            at.ledger,
            aws.commands,
            event_id=at.intent or at.event_id,
            instance_id=at.resource,
            command=str(self.command),
            timeout_seconds=int(self.timeout or self.timeout_seconds or 0),
            what=at.label or "checkpoint",
        )
        data = {"delivered": sent.delivered, "command_id": sent.command_id, "error": sent.error}
        if sent.delivered:
            return Outcome(ok=True, done=f"checkpoint command {sent.command_id} sent", data=data)
        return Outcome(
            ok=False,
            error_code="NotDelivered",
            message=str(sent.error),
            done=f"checkpoint not delivered ({sent.error})",
            data=data,
        )


# --- carried out by the runtime (ledger, findings bus): no permission of their own ------------------------------


class Record(Action):
    type: Literal["record"] = "record"
    BY_RUNTIME = True
    item: str | None = None
    creator: str | None = None
    session: str | None = None
    kind: str | None = None
    status: str | None = None
    checkpoint_status: str | None = None
    target: str | None = None


class Notify(Action):
    """A finding for people; the notifier's delivery (Slack, SES) is its own capability's permission."""

    type: Literal["notify"] = "notify"
    BY_RUNTIME = True
    owner: str | None = None
    team: str | None = None
    to: str | None = None
    reason: str | None = None
    held_back: list[str] | None = None
    rule: str | None = None
    channel: str | None = None
    channels: list[str] | None = None
    target: str | list[str] | None = None


class Warn(Action):
    """The idle warning: a finding naming what will happen, when, and how to keep the instance."""

    type: Literal["warn"] = "warn"
    BY_RUNTIME = True
    owner: str | None = None
    due: str | None = None
    planned: str | None = None
    snooze_tag: str | None = None
    exempt_tag: str | None = None
    #: How the planned reclaim would go (``autoscaling`` or ``kubernetes``, and the group or cluster), so the warning
    #: names the path that would run (``governor.domain.facts.action_path``), never "terminated" for a drained node.
    via: str | None = None
    group: str | None = None


#: A typed action of any capability, as a decision holds it: written out as its own class (``SerializeAsAny``), so
#: ledger items, ``explain`` and findings keep each class's shape. Reading one back by ``type`` is the registry's
#: union of every registered class (:meth:`governor.capability.Registry.parse_action`).
AnyAction = SerializeAsAny[Action]
