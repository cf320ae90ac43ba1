"""The GPU fleet as the domain sees it: instances, ownership, exemptions, snoozes.

Ownership is resolved in one order everywhere (reports, warnings, routing): the owner / team tags named in the
policy, else the creator the governor recorded at launch, else ``unknown``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal

from governor.domain.times import parse_time
from governor.policy import Exemptions, FleetPolicy

UNKNOWN = "unknown"


@dataclass(frozen=True)
class Instance:
    """What the governor reads about one EC2 instance (the EC2 adapter builds these from DescribeInstances)."""

    id: str
    type: str
    state: str
    launch_time: dt.datetime
    tags: dict[str, str] = field(default_factory=dict)
    lifecycle: Literal["on-demand", "spot"] = "on-demand"
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


def exemption(
    instance_id: str, tags: dict[str, str], fleet: FleetPolicy, exemptions: Exemptions, now: dt.datetime
) -> str | None:
    """Why the instance is exempt right now, or None. The exempt tag may carry an ISO expiry date."""
    if exemptions.matches(instance_id, tags):
        return "exempt by policy (id or tag in the section's exemptions)"
    value = tags.get(fleet.exempt_tag)
    if value is not None:
        until = parse_time(value)
        if until is None:
            if value.strip().lower() in ("", "false", "no", "0"):
                return None
            return f"tag {fleet.exempt_tag}={value}"
        if until > now:
            return f"tag {fleet.exempt_tag} until {until.isoformat()}"
    return None


def snoozed_until(tags: dict[str, str], fleet: FleetPolicy, now: dt.datetime) -> dt.datetime | None:
    """The owner's snooze (``governor:keep-until``) when it is still in the future."""
    value = tags.get(fleet.keep_until_tag)
    until = parse_time(value) if value else None
    return until if until and until > now else None
