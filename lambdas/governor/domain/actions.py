"""Typed actions: one class per action type, with its own fields and the IAM actions executing it takes.

The domain returns these; handlers read their attributes. ``model_dump`` keeps the shape the ledger, ``explain`` and
the findings have always had: ``type``, ``enforced`` and the fields the domain actually set, in declaration order
(an unset optional field is left out rather than written as ``null``). ``permissions(policy)`` is what the function
executing the action needs beyond the shared runtime (:data:`governor.registry.BASE_PERMISSIONS`); like Cloud
Custodian's ``get_permissions()`` it may depend on policy options, and it is empty for actions the runtime itself
carries out (a ledger record, a finding on the bus). Adding a permission is one line in one class.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from governor.policy import Policy

_ALWAYS = frozenset({"type", "enforced"})


class Action(BaseModel):
    """One thing the governor would do; ``enforced`` is false when the policy is report-only."""

    model_config = ConfigDict(extra="forbid")

    type: str
    enforced: bool = False

    #: IAM actions executing this action takes, whatever the policy says (see :meth:`permissions`).
    IAM: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _as_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if key in _ALWAYS or key in self.model_fields_set}

    @classmethod
    def permissions(cls, policy: Policy) -> frozenset[str]:
        """The IAM actions the executing function needs for this action under ``policy``."""
        return cls.IAM


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

    @classmethod
    def permissions(cls, policy: Policy) -> frozenset[str]:
        return cls.IAM | (cls.SCALE_IN if policy.idle.asg_action == "scale_in" else frozenset())


class Stop(_Reclaim):
    type: Literal["stop"] = "stop"
    IAM = frozenset({"ec2:StopInstances"})


class Terminate(_Reclaim):
    type: Literal["terminate"] = "terminate"
    IAM = frozenset({"ec2:TerminateInstances"})


class Tag(Action):
    """Write tags on an instance (and drop the keys in ``remove``, which takes :class:`Untag`'s permission)."""

    type: Literal["tag"] = "tag"
    tags: dict[str, str] = Field(default_factory=dict)
    remove: list[str] | None = None
    IAM = frozenset({"ec2:CreateTags"})


class Untag(Action):
    type: Literal["untag"] = "untag"
    keys: list[str] | None = None
    IAM = frozenset({"ec2:DeleteTags"})


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


# --- spot ------------------------------------------------------------------------------------------------------


class Deregister(Action):
    type: Literal["deregister"] = "deregister"
    target_groups: str | None = None
    IAM = frozenset(
        {
            "elasticloadbalancing:DescribeTargetGroups",
            "elasticloadbalancing:DescribeTargetHealth",
            "elasticloadbalancing:DeregisterTargets",
        }
    )

    @classmethod
    def permissions(cls, policy: Policy) -> frozenset[str]:
        return cls.IAM if policy.spot.deregister_from_target_groups else frozenset()


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


# --- keys ------------------------------------------------------------------------------------------------------


class EnableKeyRotation(Action):
    type: Literal["enable_key_rotation"] = "enable_key_rotation"
    key_id: str | None = None
    rotation_period_days: int | None = None
    IAM = frozenset({"kms:EnableKeyRotation"})


class RotateKey(Action):
    type: Literal["rotate_key"] = "rotate_key"
    key_id: str | None = None
    IAM = frozenset({"kms:RotateKeyOnDemand"})


class DeactivateAccessKey(Action):
    type: Literal["deactivate_access_key"] = "deactivate_access_key"
    user: str | None = None
    access_key_id: str | None = None
    IAM = frozenset({"iam:UpdateAccessKey"})


class SetSecretRotation(Action):
    """RotateSecret with the policy's schedule; Secrets Manager requires the caller may invoke the rotation function."""

    type: Literal["set_secret_rotation"] = "set_secret_rotation"
    secret_id: str | None = None
    rotation_lambda: str | None = None
    rotation_rules: dict[str, Any] = Field(default_factory=dict)
    IAM = frozenset({"secretsmanager:RotateSecret", "lambda:InvokeFunction"})


# --- carried out by the runtime (ledger, findings bus): no permission of their own ------------------------------


class Record(Action):
    type: Literal["record"] = "record"
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
    owner: str | None = None
    due: str | None = None
    planned: str | None = None
    snooze_tag: str | None = None
    exempt_tag: str | None = None


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
