"""Ownership order, exemptions with expiry, and snoozes."""

from __future__ import annotations

import datetime as dt

from governor.domain.fleet import exemption, ownership, snoozed_until
from governor.policy import Exemptions, parse_policy

FLEET = parse_policy({}).fleet
NOW = dt.datetime(2026, 12, 2, 12, tzinfo=dt.UTC)


def test_owner_tag_then_creator_then_unknown() -> None:
    assert ownership({"owner": "ana", "team": "nlp"}, FLEET).source == "tag"
    by_creator = ownership({"governor:creator": "arn:aws:iam::1:role/ci/session"}, FLEET)
    assert by_creator.owner.endswith("session") and by_creator.source == "creator" and by_creator.team == "unknown"
    nobody = ownership({}, FLEET)
    assert (nobody.owner, nobody.team, nobody.resolved) == ("unknown", "unknown", False)


def test_exempt_tag_with_expiry() -> None:
    none = Exemptions()
    assert exemption("i-1", {"governor:exempt": "true"}, FLEET, none, NOW)
    assert exemption("i-1", {"governor:exempt": "2026-12-31"}, FLEET, none, NOW)
    assert exemption("i-1", {"governor:exempt": "2026-01-01"}, FLEET, none, NOW) is None
    assert exemption("i-1", {"governor:exempt": "false"}, FLEET, none, NOW) is None
    assert exemption("i-9", {}, FLEET, Exemptions(ids=["i-9"]), NOW)
    assert exemption("i-1", {"env": "prod"}, FLEET, Exemptions(tags={"env": "*"}), NOW)


def test_snooze_only_in_future() -> None:
    assert snoozed_until({"governor:keep-until": "2026-12-02T18:00:00Z"}, FLEET, NOW)
    assert snoozed_until({"governor:keep-until": "2026-12-02T08:00:00Z"}, FLEET, NOW) is None
    assert snoozed_until({"governor:keep-until": "soon"}, FLEET, NOW) is None
