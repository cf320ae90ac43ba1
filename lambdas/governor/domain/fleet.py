"""The GPU fleet as the domain sees it: instances, ownership, exemptions, snoozes.

Ownership is resolved in one order everywhere (reports, warnings, routing): the owner / team tags named in the
policy, else the creator the governor recorded at launch, else ``unknown``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

from governor.core_policy import Exemptions, FleetPolicy
from governor.domain.capacity import Reservation
from governor.domain.times import parse_time

UNKNOWN = "unknown"
#: EC2's ``InstanceLifecycleType`` values (botocore's ec2 model: spot, scheduled, capacity-block,
#: interruptible-capacity-reservation), plus ``on-demand`` for an instance without one and ``unknown`` for a value
#: EC2 added after this code was written (never acted on as if On-Demand).
Lifecycle = Literal["on-demand", "spot", "scheduled", "capacity-block", "interruptible-capacity-reservation", "unknown"]
LIFECYCLES: tuple[Lifecycle, ...] = (
    "on-demand",
    "spot",
    "scheduled",
    "capacity-block",
    "interruptible-capacity-reservation",
)

#: The ledger kind of an instance's launch record (lifecycle writes it from CloudTrail's RunInstances, keyed by the
#: instance id, with the ``creator``): who launched an untagged instance, even while tagging is report-only.
LAUNCH_KIND = "launch"
#: The ledger kind of a Keep clicked while buttons are report-only (keyed by instance id, with ``until`` and ``by``):
#: no tag was written, so a report-only idle sweep reads it as the snooze it would have been (never when idle enforces).
KEEP_KIND = "idle-keep"


@dataclass(frozen=True)
class Instance:
    """What the governor reads about one EC2 instance (the EC2 adapter builds these from DescribeInstances)."""

    id: str
    type: str
    state: str
    launch_time: dt.datetime
    tags: dict[str, str] = field(default_factory=dict)
    #: EC2's ``InstanceLifecycle`` (absent: On-Demand, possibly running in an On-Demand Capacity Reservation).
    lifecycle: Lifecycle = "on-demand"
    zone: str | None = None
    root_device_type: str = "ebs"
    public_ip: str | None = None
    private_ip: str | None = None
    subnet_id: str | None = None
    vpc_id: str | None = None
    security_groups: tuple[str, ...] = ()
    network_interfaces: tuple[dict[str, object], ...] = ()
    launch_template_id: str | None = None
    launch_template_version: str | None = None
    iam_instance_profile: str | None = None
    #: The capacity reservation the instance runs in (a Capacity Block's too), and how it targets reservations.
    capacity_reservation_id: str | None = None
    capacity_reservation_preference: str | None = None
    capacity_block_id: str | None = None
    #: The reservation itself, when the caller read it (``governor.domain.capacity.with_reservations``).
    reservation: Reservation | None = None
    #: The SageMaker HyperPod cluster whose node list names this instance (``governor.domain.capacity.with_hyperpod``).
    hyperpod_cluster: str | None = None
    #: Tags that would hold the governor back but are not honoured, with why (``governor.domain.tagging.bounded``):
    #: no person is recorded setting them, or their policy exemption ended. Reported; never exempt anything.
    refused_tags: tuple[TagProblem, ...] = ()
    #: ``PlatformDetails`` (``Linux/UNIX``...) and ``Placement.Tenancy``: what a capacity reservation matches on.
    platform: str | None = None
    tenancy: str | None = None
    #: The EBS volumes attached (``BlockDeviceMappings``) and why it is in its state (``StateTransitionReason``, which
    #: for a stopped instance carries when it stopped): what a stopped instance still bills.
    volume_ids: tuple[str, ...] = ()
    state_reason: str | None = None

    @property
    def refused_keys(self) -> frozenset[str]:
        return frozenset(problem.key for problem in self.refused_tags)


@dataclass(frozen=True)
class Ownership:
    owner: str
    team: str
    source: Literal["tag", "creator", "unknown"]

    @property
    def resolved(self) -> bool:
        return self.team != UNKNOWN


def ownership(tags: dict[str, str], fleet: FleetPolicy, creator_tag: str = "governor:creator") -> Ownership:
    """owner/team tags, else the recorded creator (for the owner), else ``unknown``."""
    owner = tags.get(fleet.owner_tag, "").strip()
    team = tags.get(fleet.team_tag, "").strip()
    creator = tags.get(creator_tag, "").strip()
    if owner:
        return Ownership(owner=owner, team=team or UNKNOWN, source="tag")
    if creator:
        return Ownership(owner=creator, team=team or UNKNOWN, source="creator")
    return Ownership(owner=UNKNOWN, team=team or UNKNOWN, source="unknown")


EXEMPT_TRUE = "true"


@dataclass(frozen=True)
class TagProblem:
    """A governor tag whose value the governor refuses to honour, reported so a person can fix or explain it."""

    key: str
    value: str
    reason: str

    def __str__(self) -> str:
        return f"tag {self.key}={self.value!r} ignored: {self.reason}"


def _dated(value: str) -> dt.datetime | None:
    """A strict ISO date or date-time (what ``date -I`` or ``date -Iseconds`` print); nothing looser."""
    text = value.strip()
    if not text or not text[:4].isdigit() or len(text) < 10 or text[4] != "-":
        return None
    return parse_time(text)


def exempt_tag_problem(value: str, fleet: FleetPolicy, now: dt.datetime) -> TagProblem | None:
    """Why an exempt tag value is not honoured: only ``true`` or an ISO date at most ``max_exemption_days`` ahead."""
    if value.strip().lower() in (EXEMPT_TRUE, "false"):
        return None
    until = _dated(value)
    if until is None:
        return TagProblem(fleet.exempt_tag, value, "the value must be 'true' or an ISO date (YYYY-MM-DD)")
    limit = now + dt.timedelta(days=fleet.max_exemption_days)
    if until > limit:
        return TagProblem(
            fleet.exempt_tag,
            value,
            f"more than fleet.max_exemption_days ({fleet.max_exemption_days}) ahead; "
            "ask for a policy exemption instead",
        )
    return None


def snooze_tag_problem(value: str, fleet: FleetPolicy, now: dt.datetime) -> TagProblem | None:
    """Why a snooze is not honoured: it must be an ISO date-time at most ``max_snooze_days`` ahead."""
    until = _dated(value)
    if until is None:
        return TagProblem(fleet.keep_until_tag, value, "the value must be an ISO date or date-time")
    if until > now + dt.timedelta(days=fleet.max_snooze_days):
        return TagProblem(
            fleet.keep_until_tag, value, f"more than fleet.max_snooze_days ({fleet.max_snooze_days}) ahead"
        )
    return None


def tag_problems(tags: dict[str, str], fleet: FleetPolicy, now: dt.datetime) -> list[TagProblem]:
    """Every exemption or snooze tag on a resource that is ignored, with why (each becomes a finding)."""
    problems = []
    if fleet.exempt_tag in tags:
        problem = exempt_tag_problem(tags[fleet.exempt_tag], fleet, now)
        if problem:
            problems.append(problem)
    if fleet.keep_until_tag in tags:
        problem = snooze_tag_problem(tags[fleet.keep_until_tag], fleet, now)
        if problem:
            problems.append(problem)
    return problems


def exemption(
    instance_id: str,
    tags: dict[str, str],
    fleet: FleetPolicy,
    exemptions: Exemptions,
    now: dt.datetime,
    *,
    refused: Collection[str] = (),
) -> str | None:
    """Why the instance is exempt right now, or None.

    The policy's own exemptions hold, a tag of ``exemptions.tags`` only when its key is not ``refused`` (no person
    recorded setting it, or its bound passed: ``governor.domain.tag_exemptions``). The exempt tag is honoured only as
    ``true`` or as an ISO date no more than ``fleet.max_exemption_days`` ahead: any account user can tag, so ``nope``,
    ``off`` or ``9999-01-01`` exempt nothing (:func:`tag_problems` reports them).
    """
    if exemptions.matches(instance_id, {k: v for k, v in tags.items() if k not in refused}):
        return "exempt by policy (id or tag in the section's exemptions)"
    value = tags.get(fleet.exempt_tag)
    if value is None or exempt_tag_problem(value, fleet, now) is not None:
        return None
    if value.strip().lower() == EXEMPT_TRUE:
        return f"tag {fleet.exempt_tag}=true"
    until = _dated(value)
    if until is not None and until > now:
        return f"tag {fleet.exempt_tag} until {until.isoformat()}"
    return None


def snoozed_until(tags: dict[str, str], fleet: FleetPolicy, now: dt.datetime) -> dt.datetime | None:
    """The owner's snooze (``governor:keep-until``) when it is in the future and within ``fleet.max_snooze_days``."""
    value = tags.get(fleet.keep_until_tag)
    if not value or snooze_tag_problem(value, fleet, now) is not None:
        return None
    until = _dated(value)
    return until if until and until > now else None


@dataclass(frozen=True)
class CommandChoice:
    """The checkpoint command for one instance: always a policy string; ``name`` is the allow-list entry the tag named.

    ``problem`` says why the instance's tag was not honoured (an unknown name, or a tag that looks like a command);
    the caller reports it as a finding and never runs the tag's value.
    """

    command: str | None
    source: Literal["tag", "policy"]
    name: str | None = None
    problem: str | None = None


def checkpoint_choice(tags: dict[str, str], fleet: FleetPolicy, default: str | None) -> CommandChoice:
    """The tag may only *name* one of ``fleet.checkpoint_commands``; anything else falls back to the policy default.

    Any account user who can tag an instance would otherwise choose what runs as root on it through SSM.
    """
    named = tags.get(fleet.checkpoint_command_tag, "").strip()
    if not named:
        return CommandChoice(default, "policy")
    if named in fleet.checkpoint_commands:
        return CommandChoice(fleet.checkpoint_commands[named], "tag", named)
    known = ", ".join(sorted(fleet.checkpoint_commands)) or "none are defined"
    shown = named if len(named) <= 80 else named[:79] + "…"
    problem = (
        f"tag {fleet.checkpoint_command_tag}={shown!r} names no entry of fleet.checkpoint_commands ({known}); "
        "it was not run"
    )
    return CommandChoice(default, "policy", problem=problem)
