"""The pure side of Slack buttons: what a click may say, who may click, and how long a Keep lasts."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import urlencode

import pytest

from governor.interactions.domain import (
    KEEP_HOURS,
    KEEP_MORNING,
    ClickError,
    Person,
    authorise,
    keep_until,
    parse_click,
)
from governor.policy import PolicyError, parse_policy

TOKEN = "0123456789abcdef0123456789abcdef"


def _payload(**changes: Any) -> str:
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": "U123ABC"},
        "response_url": "https://hooks.slack.com/actions/T1/2/3",
        "actions": [{"action_id": KEEP_HOURS, "value": TOKEN, "action_ts": "1.2"}],
        **changes,
    }
    return urlencode({"payload": json.dumps(payload)})


def test_a_click_is_parsed_from_slacks_form_body() -> None:
    click = parse_click(_payload())
    assert (click.token, click.action_id, click.user_id) == (TOKEN, KEEP_HOURS, "U123ABC")
    assert click.key == f"slack:{KEEP_HOURS}:{TOKEN}:U123ABC:1.2"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("", "payload="),
        (urlencode({"payload": "{not json"}), "not JSON"),
        (_payload(type="view_submission"), "view_submission"),
        (_payload(actions=[]), "exactly one action"),
        (_payload(actions=[{"action_id": "run_anything", "value": TOKEN, "action_ts": "1"}]), "action_id"),
        (_payload(actions=[{"action_id": KEEP_HOURS, "value": "i-0abc", "action_ts": "1"}]), "token"),
        (_payload(response_url="https://evil.example.com/hook"), "hooks.slack.com"),
        (_payload(response_url="http://hooks.slack.com/actions/1"), "hooks.slack.com"),
    ],
)
def test_anything_but_a_click_on_a_governor_button_is_refused_in_one_line(body: str, words: str) -> None:
    with pytest.raises(ClickError) as error:
        parse_click(body)
    assert words in str(error.value) and "\n" not in str(error.value)


def _policy(**interactions: Any) -> Any:
    return parse_policy(
        {
            "fleet": {"max_snooze_days": 3},
            "interactions": {
                "admins": ["root@example.com"],
                "teams": {"ml": {"members": ["Team@Example.com"], "timezone": "America/New_York"}},
                **interactions,
            },
        }
    )


@pytest.mark.parametrize(
    ("email", "owner", "team", "allowed"),
    [
        ("ana@example.com", "Ana@Example.com", "vision", True),
        ("team@example.com", "someone@example.com", "ml", True),
        ("root@example.com", "someone@example.com", "other", True),
        ("bob@example.com", "ana@example.com", "ml", False),
        ("bob@example.com", "unknown", "unknown", False),
        (None, "ana@example.com", "ml", False),
    ],
)
def test_owner_team_or_admin_and_nobody_else(email: str | None, owner: str, team: str, allowed: bool) -> None:
    ok, why = authorise(Person("U1", email, "policy" if email else "unknown"), owner, team, _policy())
    assert ok is allowed and why


def test_an_owner_matches_only_by_full_identity() -> None:
    """Issue 33: a bare owner tag ``ana`` matched both ana@corp.example and ana@contractor.example."""
    policy = _policy()
    for person in (Person("U1", "ana@example.com", "policy"), Person("U2", "ana@contractor.example", "policy")):
        assert not authorise(person, "ana", "vision", policy)[0]
    assert not authorise(Person("U1", "ana@guest.example", "slack"), "ana", "vision", policy)[0]
    assert authorise(Person("U1", "ana@example.com", "policy"), "Ana@Example.com", "vision", policy)[0]


def test_tomorrow_nine_follows_the_teams_clock_across_daylight_saving() -> None:
    # 2026-11-01 is the day New York leaves daylight saving time: 09:00 there is 14:00 UTC, not 13:00.
    now = dt.datetime(2026, 10, 31, 20, 0, tzinfo=dt.UTC)
    until, what = keep_until(KEEP_MORNING, now, "ml", _policy())
    assert until == dt.datetime(2026, 11, 1, 14, 0, tzinfo=dt.UTC)
    assert "America/New_York" in what


def test_tomorrow_is_the_teams_tomorrow_not_utcs() -> None:
    # 02:00 UTC on the 5th is still the 4th in New York: "tomorrow 09:00" is the 5th at 09:00 there.
    now = dt.datetime(2026, 12, 5, 2, 0, tzinfo=dt.UTC)
    until, _ = keep_until(KEEP_MORNING, now, "ml", _policy())
    assert until == dt.datetime(2026, 12, 5, 14, 0, tzinfo=dt.UTC)
    utc_team, _ = keep_until(KEEP_MORNING, now, "no-such-team", _policy())
    assert utc_team == dt.datetime(2026, 12, 6, 9, 0, tzinfo=dt.UTC)


def test_a_keep_never_reaches_past_the_maximum_snooze() -> None:
    now = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)
    until, what = keep_until(KEEP_HOURS, now, None, _policy(keep_hours=100))
    assert until == now + dt.timedelta(days=3) and "capped" in what
    off = parse_policy({"fleet": {"max_snooze_days": 0}})
    assert keep_until(KEEP_HOURS, now, None, off)[0] is None


def test_a_team_time_zone_must_exist() -> None:
    with pytest.raises(PolicyError, match=r"interactions\.teams\.ml\.timezone"):
        parse_policy({"interactions": {"teams": {"ml": {"timezone": "Mars/Olympus_Mons"}}}})
