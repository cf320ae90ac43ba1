"""Which tags may hold the governor back, given who is recorded setting them.

Any account user can tag, so a tag that makes the governor look away counts only with an author and an end:

- ``governor:exempt`` and ``governor:keep-until`` whose recorded author is no person (an AWS service-linked role
  wrote them on a launch: Auto Scaling copying a launch template's or a group's tags, which no reserved-tag policy
  binds and whose writer CloudTrail does not name) are refused; so are those on an instance an AWS service launched
  (AWS's own ``aws:autoscaling:groupName`` / ``aws:ec2:fleet-id`` tags say so) when nothing is recorded at all.
- A policy tag exemption (a section's ``exemptions.tags``: ``env: prod`` exempts whatever anyone tags ``env=prod``) is
  honoured only while a person is recorded setting that tag (``governor.domain.tagging``: the lifecycle function
  records ``CreateTags`` and ``RunInstances``), and only for ``fleet.max_exemption_days`` from that setting.

Everything here is pure: ``recorded(key, value)`` is the caller's lookup of the latest recorded setting of ``key`` to
``value`` on the resource (a ledger item), and each refusal is a :class:`~governor.domain.fleet.TagProblem` the caller
reports as a finding (``idle.tags-ignored``) on every sweep while it stands.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from governor.core_policy import Exemptions, FleetPolicy
from governor.domain.fleet import TagProblem
from governor.domain.times import parse_time

Recorded = Callable[[str, str], Mapping[str, Any] | None]
#: Tags only AWS writes (users cannot write ``aws:`` keys) that show a service launched the instance for a group.
SERVICE_LAUNCH_TAGS = ("aws:autoscaling:groupName", "aws:ec2:fleet-id", "aws:ec2spot:fleet-request-id")
FIRST_SEEN_SOURCE = "first-seen"


def launched_by_service(tags: Mapping[str, str]) -> str | None:
    """``key=value`` of the AWS tag showing a service launched the instance, or None."""
    return next((f"{key}={tags[key]}" for key in SERVICE_LAUNCH_TAGS if tags.get(key)), None)


def _unproven(item: Mapping[str, Any]) -> bool:
    """A recorded setting whose call proved no person (a first sighting is judged by its own rule)."""
    return item.get("proven") is False and item.get("source") != FIRST_SEEN_SOURCE


def holding_back_refusals(
    tags: Mapping[str, str], fleet: FleetPolicy, recorded: Recorded, *, launched_by: str | None
) -> list[TagProblem]:
    """The exemption and snooze tags not honoured because nobody can be proven to have set them."""
    refused = []
    for key in (fleet.exempt_tag, fleet.keep_until_tag):
        value = tags.get(key)
        if value is None:
            continue
        item = recorded(key, value)
        if item is not None and _unproven(item):
            refused.append(TagProblem(key, value, f"written by {item.get('who')}, which proves no person"))
        elif item is None and launched_by is not None:
            reason = (
                f"the instance was launched by an AWS service ({launched_by}) and nobody is recorded setting the "
                "tag: a launch template's or group's tags have no provable author; set it with CreateTags"
            )
            refused.append(TagProblem(key, value, reason))
    return refused


def policy_tag_refusals(
    tags: Mapping[str, str], exemptions: Exemptions, fleet: FleetPolicy, recorded: Recorded, now: dt.datetime
) -> list[TagProblem]:
    """The section's ``exemptions.tags`` matches on this resource that exempt nothing: no person recorded setting the
    tag, or set longer than ``fleet.max_exemption_days`` ago."""
    refused = []
    for key, wanted in exemptions.tags.items():
        value = tags.get(key)
        if value is None or not (wanted == "*" or wanted == value):
            continue
        item = recorded(key, value)
        if item is None or item.get("proven") is False:
            who = f"only {item.get('who')} is recorded" if item is not None else "nobody is recorded setting it"
            reason = (
                f"a policy tag exemption holds only while a person is recorded setting the tag, and {who}; "
                "set it with CreateTags (the lifecycle function records who) or list the resource in exemptions.ids"
            )
            refused.append(TagProblem(key, value, reason))
            continue
        set_at = parse_time(item.get("at")) if item.get("at") else None
        end = set_at + dt.timedelta(days=fleet.max_exemption_days) if set_at else None
        if end is None or end <= now:
            since = set_at.isoformat() if set_at else "an unknown time"
            reason = (
                f"the policy tag exemption {item.get('who')} set at {since} ended at "
                f"{end.isoformat() if end else 'once'} (fleet.max_exemption_days {fleet.max_exemption_days})"
            )
            refused.append(TagProblem(key, value, reason))
    return refused
