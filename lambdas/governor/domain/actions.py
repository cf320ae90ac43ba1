"""Typed actions: one class per action type, with its own fields and the IAM actions executing it takes.

The domain returns these; handlers read their attributes. ``model_dump`` keeps the shape the ledger, ``explain`` and
the findings have always had: ``type``, ``enforced`` and the fields the domain actually set, in declaration order
(an unset optional field is left out rather than written as ``null``). ``permissions(policy)`` is what the function
executing the action needs beyond the shared runtime (:data:`governor.registry.BASE_PERMISSIONS`); like Cloud
Custodian's ``get_permissions()`` it may depend on policy options, and it is empty for actions the runtime itself
carries out (a ledger record, a finding on the bus). Adding a permission is one line in one class.

``execute(aws, at)`` carries one enforced action out through the adapters it is given (``aws``: the capability's
adapter bundle, which each class states as a small ``Protocol``) and returns one :class:`Outcome`; the generic runner
(:mod:`governor.runner`) calls it after re-reading the resource. Nothing here imports boto3: the adapters are passed
in, and the at-most-once protocol for ``SendCommand`` (``governor.domain.once``) works on the ledger and commands
ports it is handed. Nothing here imports a capability, an adapter or the runtime (``tests/unit/test_layers.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, NamedTuple, Protocol

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from governor.domain.ids import deterministic_id
from governor.domain.model import Model
from governor.domain.once import send_command_once
from governor.domain.verification import Verification

if TYPE_CHECKING:
    from governor.domain.fleet import Instance
    from governor.policy import Policy

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
    policy: Policy
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

    def stop(self, instance_id: str) -> None: ...

    def terminate(self, instance_id: str) -> None: ...


class _ScaleIn(Protocol):
    def scale_in(self, instance_id: str) -> str: ...


class InstanceChanges(Protocol):
    """EC2 instance writes and, for group members, Auto Scaling (``adapters.ec2.Ec2Actions``, ``autoscaling``)."""

    @property
    def actions(self) -> _InstanceWrites: ...

    @property
    def groups(self) -> _ScaleIn | None: ...


class Commands(Protocol):
    """SSM Run Command (``adapters.ssm.SsmCommands``); ``find`` lets a retry look a command up instead of resending."""

    @property
    def commands(self) -> Any: ...


class _Revoker(Protocol):
    def revoke(self, group_id: str, rule_id: str) -> bool: ...


class GroupChanges(Protocol):
    @property
    def groups(self) -> _Revoker: ...


class _AddressWrites(Protocol):
    def disassociate(self, association_id: str) -> None: ...

    def drop_auto_assigned(self, network_interface_id: str) -> None: ...

    def auto_assigned(self, instance: Instance) -> Any:
        """The public address the instance holds now, as auto-assigned (``public_ip``, ``network_interface_id``)."""
        ...


class _InstanceReads(Protocol):
    def instance(self, instance_id: str) -> Instance | None: ...


class AddressChanges(Protocol):
    @property
    def addresses(self) -> _AddressWrites: ...

    @property
    def instances(self) -> _InstanceReads: ...


class _Kms(Protocol):
    def enable_rotation(self, key_id: str, period_days: int) -> Outcome: ...

    def rotate_on_demand(self, key_id: str) -> Outcome: ...


class _AccessKeys(Protocol):
    def deactivate(self, user: str, key_id: str) -> Outcome: ...


class _Secrets(Protocol):
    def set_rotation(self, secret: Any, rules: dict[str, Any], token: str | None = None) -> Outcome: ...


class KeyChanges(Protocol):
    @property
    def kms(self) -> _Kms: ...

    @property
    def iam(self) -> _AccessKeys: ...

    @property
    def secrets(self) -> _Secrets: ...


class _Recovery(Protocol):
    def deregister(self, instance: Instance, fleet_tags: Mapping[str, str]) -> Any: ...

    def complete_lifecycle_action(self, instance_id: str) -> Any: ...

    def replace(self, instance: Instance, candidates: Any, market: Literal["spot", "on-demand"]) -> Any: ...


class SpotChanges(Protocol):
    @property
    def recovery(self) -> _Recovery: ...


class Action(Model):
    """One thing the governor would do; ``enforced`` is false when the policy is report-only."""

    model_config = ConfigDict(extra="forbid")

    type: str
    enforced: bool = False

    #: IAM actions executing this action takes, whatever the policy says (see :meth:`permissions`).
    IAM: ClassVar[frozenset[str]] = frozenset()
    #: Carried out by the runtime itself (a ledger record, a finding on the bus), not by ``execute``.
    BY_RUNTIME: ClassVar[bool] = False

    @model_serializer(mode="wrap")
    def _as_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if key in _ALWAYS or key in self.model_fields_set}

    @classmethod
    def permissions(cls, policy: Policy) -> frozenset[str]:
        """The IAM actions the executing function needs for this action under ``policy``."""
        return cls.IAM

    def execute(self, aws: Any, at: Acting) -> Outcome:
        """Carry the action out; the runtime's own actions (record, notify, warn) have nothing to do here."""
        return Outcome(ok=True)


# --- instances -------------------------------------------------------------------------------------------------


class _Reclaim(Action):
    """Stop or terminate an idle instance, directly or (``via`` autoscaling) through its Auto Scaling group."""

    lifecycle: str | None = None
    root_device: str | None = None
    requested_by: str | None = None
    via: str | None = None
    group: str | None = None
    decrement_desired: bool | None = None

    #: Reclaiming an Auto Scaling group member through its group (``idle.asg_action: scale_in``).
    SCALE_IN: ClassVar[frozenset[str]] = frozenset(
        {"autoscaling:DescribeAutoScalingGroups", "autoscaling:TerminateInstanceInAutoScalingGroup"}
    )

    #: Draining an EKS node (``idle.clusters[].reclaim: drain``): the cluster's endpoint, then its Kubernetes API
    #: (the role's EKS access entry) and, for a managed node group, terminate-in-group.
    DRAIN: ClassVar[frozenset[str]] = frozenset({"eks:DescribeCluster"}) | SCALE_IN

    @classmethod
    def permissions(cls, policy: Policy) -> frozenset[str]:
        drains = any(c.reclaim == "drain" for c in policy.idle.clusters)
        return (
            cls.IAM
            | (cls.SCALE_IN if policy.idle.asg_action == "scale_in" else frozenset())
            | (cls.DRAIN if drains else frozenset())
        )


class Stop(_Reclaim):
    type: Literal["stop"] = "stop"
    IAM = frozenset({"ec2:StopInstances"})

    def execute(self, aws: InstanceChanges, at: Acting) -> Outcome:
        aws.actions.stop(at.resource)
        return Outcome(ok=True, done="stopped")


class Terminate(_Reclaim):
    type: Literal["terminate"] = "terminate"
    IAM = frozenset({"ec2:TerminateInstances"})

    def execute(self, aws: InstanceChanges, at: Acting) -> Outcome:
        if self.via == "kubernetes":
            nodes = getattr(aws, "nodes", None)
            # A failed drain says so in ``done`` ("not drained: ..."), which the ledger, the finding and Stop now's
            # answer carry (Stop now refuses on it instead of answering "terminated").
            if nodes is None:  # a member account's sweep: the hub reaches no cluster there (docs/kubernetes.md)
                why = f"no access to cluster {self.group}"
                return Outcome(ok=False, error_code="NoKubernetesAccess", message=why, done=f"not drained: {why}")
            # One pass of the node's drain, resumed from where the ledger says it stopped; ok only once it is gone.
            outcome: Outcome = nodes.reclaim_outcome(aws, at, str(self.group))
            return outcome
        if self.via == "autoscaling":
            if aws.groups is None:
                raise RuntimeError("no Auto Scaling client configured")
            activity = aws.groups.scale_in(at.resource)
            return Outcome(
                ok=True, done=f"terminated through Auto Scaling group {self.group} (desired capacity -1; {activity})"
            )
        aws.actions.terminate(at.resource)
        return Outcome(ok=True, done="terminated")


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


# --- spot ------------------------------------------------------------------------------------------------------


class Deregister(Action):
    type: Literal["deregister"] = "deregister"
    target_groups: str | None = None
    IAM = frozenset(
        {
            "elasticloadbalancing:DescribeTargetGroups",
            "elasticloadbalancing:DescribeTargetHealth",
            "elasticloadbalancing:DescribeTags",
            "elasticloadbalancing:DeregisterTargets",
        }
    )

    @classmethod
    def permissions(cls, policy: Policy) -> frozenset[str]:
        return cls.IAM if policy.spot.deregister_from_target_groups else frozenset()

    def execute(self, aws: SpotChanges, at: Acting) -> Outcome:
        """Only from target groups carrying ``fleet.fleet_tags`` (the IAM grant has the same condition)."""
        result = aws.recovery.deregister(at.live, at.policy.fleet.fleet_tags)
        groups, left = list(result.groups), list(result.left_alone)
        done = f"deregistered from {len(groups)} target group(s)"
        if left:
            done += f"; left in {len(left)} target group(s) without fleet.fleet_tags: {', '.join(left)}"
        return Outcome(ok=True, done=done, data={"target_groups": groups, "left_alone": left})


class CompleteLifecycleAction(Action):
    type: Literal["complete_lifecycle_action"] = "complete_lifecycle_action"
    auto_scaling_group: str | None = None
    when: str | None = None
    IAM = frozenset(
        {
            "autoscaling:DescribeAutoScalingInstances",
            "autoscaling:DescribeLifecycleHooks",
            "autoscaling:CompleteLifecycleAction",
        }
    )

    @classmethod
    def permissions(cls, policy: Policy) -> frozenset[str]:
        return cls.IAM if policy.spot.complete_lifecycle_action else frozenset()

    def execute(self, aws: SpotChanges, at: Acting) -> Outcome:
        note = str(aws.recovery.complete_lifecycle_action(at.resource).note)
        return Outcome(ok=True, done=f"lifecycle action: {note}", data={"note": note})


#: How ``Replace.candidates`` writes "wherever the launch template puts it".
ANY_ZONE = "any"


class Place(NamedTuple):
    """One place ``Replace`` tries, in the shape the recovery adapter reads: a type and a zone (None: any)."""

    instance_type: str
    zone: str | None


class Replace(Action):
    """Relaunch capacity from the interrupted instance's launch template (``spot.replacement``)."""

    type: Literal["replace"] = "replace"
    market: str | None = None
    launch_template: str | None = None
    version: str | None = None
    candidates: list[dict[str, str]] | None = None
    IAM = frozenset({"ec2:DescribeSubnets", "ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"})

    @classmethod
    def permissions(cls, policy: Policy) -> frozenset[str]:
        return cls.IAM if policy.spot.replacement != "none" else frozenset()

    def execute(self, aws: SpotChanges, at: Acting) -> Outcome:
        """Relaunch from the candidates the decision listed (the policy's fallback types and zones), in the policy's
        market; the launch's client token is derived from the interrupted instance inside the adapter, so a retry finds
        the same launch. Without a list, the instance's own type, in any zone."""
        instance = at.live
        market: Literal["spot", "on-demand"] = "spot" if at.policy.spot.replacement == "spot" else "on-demand"
        listed = self.candidates or [{"instance_type": instance.type, "zone": ANY_ZONE}]
        places = [Place(c["instance_type"], None if c.get("zone", ANY_ZONE) == ANY_ZONE else c["zone"]) for c in listed]
        replacement = aws.recovery.replace(instance, places, market)
        done = f"replacement {replacement.instance_id} launched" if replacement.instance_id else ""
        return Outcome(
            ok=bool(replacement.instance_id),
            done=done,
            message=replacement.reason or "",
            data={"replacement": replacement},
        )


# --- network ---------------------------------------------------------------------------------------------------


class RevokeIngress(Action):
    type: Literal["revoke_ingress"] = "revoke_ingress"
    group_id: str | None = None
    rule_ids: list[str] = Field(default_factory=list)
    protocol: str | None = None
    ports: str | None = None
    source: str | None = None
    reason: str | None = None
    IAM = frozenset({"ec2:RevokeSecurityGroupIngress"})

    def execute(self, aws: GroupChanges, at: Acting) -> Outcome:
        """Revoke each offending rule by its own id, so compliant rules added by the same call stay."""
        group_id = str(self.group_id)
        revoked: list[str] = []
        for rule_id in self.rule_ids:
            if aws.groups.revoke(group_id, rule_id):
                revoked.append(f"revoked {rule_id} ({self.protocol} {self.ports} from {self.source})")
            else:
                revoked.append(f"{rule_id} was already gone")
        return Outcome(
            ok=True, done="; ".join(revoked) or f"no rule id found for {self.source} in {group_id}; nothing revoked"
        )


class RemovePublicIp(Action):
    """Disassociate an Elastic IP, or turn off the primary interface's auto-assigned public IPv4 address."""

    type: Literal["remove_public_ip"] = "remove_public_ip"
    instance_id: str | None = None
    public_ip: str | None = None
    method: Literal["disassociate_address", "modify_network_interface_attribute"] | None = None
    address: str | None = None
    association_id: str | None = None
    allocation_id: str | None = None
    network_interface_id: str | None = None
    IAM = frozenset({"ec2:DisassociateAddress", "ec2:ModifyNetworkInterfaceAttribute"})

    def execute(self, aws: AddressChanges, at: Acting) -> Outcome:
        instance_id = str(self.instance_id)
        if self.method == "disassociate_address" and self.association_id:
            return Outcome(ok=True, done=self._disassociate(aws, instance_id))
        if self.method == "modify_network_interface_attribute" and self.network_interface_id:
            aws.addresses.drop_auto_assigned(self.network_interface_id)
            return Outcome(
                ok=True,
                done=f"removed auto-assigned public IPv4 {self.public_ip} from {instance_id} "
                f"(ModifyNetworkInterfaceAttribute AssociatePublicIpAddress=false on {self.network_interface_id})",
            )
        return Outcome(
            ok=True,
            done=f"could not remove the public address of {instance_id}: no association or network interface found",
        )

    def _disassociate(self, aws: AddressChanges, instance_id: str) -> str:
        aws.addresses.disassociate(str(self.association_id))
        done = (
            f"disassociated Elastic IP {self.public_ip} ({self.association_id}) from {instance_id}; "
            "the allocation stays in the account"
        )
        # AWS gives an instance whose interface auto-assigns a fresh public address when its Elastic IP leaves.
        after = aws.instances.instance(instance_id)
        replacement = aws.addresses.auto_assigned(after) if after is not None else None
        if replacement is None or replacement.public_ip == self.public_ip:
            return done
        if replacement.network_interface_id:
            aws.addresses.drop_auto_assigned(replacement.network_interface_id)
            return (
                f"{done}; then removed the auto-assigned {replacement.public_ip} AWS gave in its place "
                f"(AssociatePublicIpAddress=false on {replacement.network_interface_id})"
            )
        return f"{done}; AWS gave it a new public address {replacement.public_ip}, which the sweep will report"


# --- keys ------------------------------------------------------------------------------------------------------


class EnableKeyRotation(Action):
    type: Literal["enable_key_rotation"] = "enable_key_rotation"
    key_id: str | None = None
    rotation_period_days: int | None = None
    IAM = frozenset({"kms:EnableKeyRotation"})

    def execute(self, aws: KeyChanges, at: Acting) -> Outcome:
        key_id = _live_id(at, "key_id") or str(self.key_id)
        period = at.policy.keys.kms_max_rotation_days
        return _said(aws.kms.enable_rotation(key_id, period), f"enabled rotation of {key_id} every {period} days")


class RotateKey(Action):
    type: Literal["rotate_key"] = "rotate_key"
    key_id: str | None = None
    IAM = frozenset({"kms:RotateKeyOnDemand"})

    def execute(self, aws: KeyChanges, at: Acting) -> Outcome:
        key_id = _live_id(at, "key_id") or str(self.key_id)
        return _said(aws.kms.rotate_on_demand(key_id), f"rotated {key_id} on demand")


class DeactivateAccessKey(Action):
    type: Literal["deactivate_access_key"] = "deactivate_access_key"
    user: str | None = None
    access_key_id: str | None = None
    IAM = frozenset({"iam:UpdateAccessKey"})

    def execute(self, aws: KeyChanges, at: Acting) -> Outcome:
        user, key_id = str(self.user), _live_id(at, "key_id") or str(self.access_key_id)
        return _said(aws.iam.deactivate(user, key_id), f"deactivated access key {key_id} of {user}")


class SetSecretRotation(Action):
    """RotateSecret with the policy's schedule; Secrets Manager requires the caller may invoke the rotation function."""

    type: Literal["set_secret_rotation"] = "set_secret_rotation"
    secret_id: str | None = None
    rotation_lambda: str | None = None
    rotation_rules: dict[str, Any] = Field(default_factory=dict)
    IAM = frozenset({"secretsmanager:RotateSecret", "lambda:InvokeFunction"})

    def execute(self, aws: KeyChanges, at: Acting) -> Outcome:
        """The secret as re-read (its own rotation function is kept); RotateSecret's ClientRequestToken comes from
        the event id, so a resent call is the same request."""
        secret = at.live
        token = deterministic_id(at.event_id, secret.arn, self.type)
        outcome = aws.secrets.set_rotation(secret, dict(self.rotation_rules), token=token)
        return _said(outcome, f"set the rotation schedule of {secret.arn}")


# --- carried out by the runtime (ledger, findings bus): no permission of their own ------------------------------


def _live_id(at: Acting, name: str) -> str | None:
    """An id from the re-read resource when the runner has one (it is what AWS calls the resource now)."""
    value = getattr(at.live, name, None)
    return str(value) if value else None


def _said(outcome: Outcome, done: str) -> Outcome:
    """An adapter's outcome with the sentence a finding reports when the change went through."""
    return replace(outcome, done=done) if outcome.ok and not outcome.done else outcome


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


#: Action types that fix the problem by themselves when done (warn, notify, record and tag only tell someone):
#: a finding whose enforced actions include one is resolved by the governor (the report, the Security Hub export).
FIXING_ACTIONS = frozenset(
    {
        "stop",
        "terminate",
        "revoke_ingress",
        "remove_public_ip",
        "enable_key_rotation",
        "rotate_key",
        "deactivate_access_key",
        "set_secret_rotation",
        "replace",
        "checkpoint",
    }
)


AnyAction = Annotated[
    Stop
    | Terminate
    | Tag
    | Untag
    | Checkpoint
    | Deregister
    | CompleteLifecycleAction
    | Replace
    | RevokeIngress
    | RemovePublicIp
    | EnableKeyRotation
    | RotateKey
    | DeactivateAccessKey
    | SetSecretRotation
    | Record
    | Notify
    | Warn,
    Field(discriminator="type"),
]

#: Every action class by its ``type``: what the ledger, ``explain`` and the findings call it.
ACTIONS: dict[str, type[Action]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        Stop,
        Terminate,
        Tag,
        Untag,
        Checkpoint,
        Deregister,
        CompleteLifecycleAction,
        Replace,
        RevokeIngress,
        RemovePublicIp,
        EnableKeyRotation,
        RotateKey,
        DeactivateAccessKey,
        SetSecretRotation,
        Record,
        Notify,
        Warn,
    )
}


def reclaim(kind: str, **fields: Any) -> Stop | Terminate:
    """The idle policy's reclaim action (``idle.action`` is ``stop`` or ``terminate``)."""
    return Terminate(**fields) if kind == "terminate" else Stop(**fields)
