"""Idle warnings digested per owner per sweep: one message per owner listing their idle instances, the dearest
first, each instance with its own buttons (a report-only instance without Stop now), within Slack's 50 blocks."""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.domain.decision import Finding
from governor.domain.messages import MAX_BLOCKS
from governor.idle.digest import DIGEST_RULE, MAX_MEMBERS, digest_warnings, warning_accepted
from governor.interactions.domain import BUTTON_KIND, STOP_NOW
from governor.notifier.handler import handle
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing.events import finding as finding_event
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.unit.test_notify_handler import FakeOutbox

NOW = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)


def warning(
    instance: str, owner: str | None, price: float | None, planned: str = "stop", team: str = "vision"
) -> Finding:
    return Finding(
        policy="idle",
        rule="idle.warned",
        severity="warning",
        resource=instance,
        title=f"Idle GPU instance {instance} (p5.48xlarge): warned",
        detail="idle for 45 min (GPU utilisation 0% < 5%); " + "x" * 600,
        owner=owner,
        team=team,
        event_id="sweep-1",
        id=f"w-{instance}",
        at=NOW,
        usd_per_hour=price,
        actions=[
            {
                "type": "warn",
                "enforced": False,
                "planned": planned,
                "due": (NOW + dt.timedelta(hours=1)).isoformat(),
                "snooze_tag": "governor:keep-until",
                "exempt_tag": "governor:exempt",
            }
        ],
    )


def test_an_owners_warnings_of_one_sweep_are_one_digest_dearest_first() -> None:
    findings = [
        warning("i-cheap", "ana@demo.example", 1.01),
        warning("i-dear", "ana@demo.example", 98.32),
        warning("i-mid", "ana@demo.example", 12.24),
        warning("i-alone", "bo@demo.example", 5.0),
    ]
    out, digested = digest_warnings(findings, "sweep-1")
    digests = [f for f in out if f.rule == DIGEST_RULE]
    assert len(digests) == 1
    (digest,) = digests
    assert [m.resource for m in digest.members] == ["i-dear", "i-mid", "i-cheap"]
    assert digest.owner == "ana@demo.example" and digest.team == "vision"
    assert digest.title == "3 idle GPU instances of ana@demo.example, $111.57 an hour"
    assert set(digested) == {"w-i-cheap", "w-i-dear", "w-i-mid"}
    by_id = {f.id: f for f in out}
    assert by_id["w-i-dear"].digested_in == digest.id and by_id["w-i-alone"].digested_in is None
    # a warning counts as published only when its digest was accepted too
    check = warning_accepted({"w-i-dear": NOW, "w-i-alone": NOW}, digested)
    assert check("w-i-alone") and not check("w-i-dear")
    assert warning_accepted({"w-i-dear": NOW, str(digest.id): NOW}, digested)("w-i-dear")
    # the same warnings give the same digest id (a retried sweep re-sends the same finding)
    assert digest_warnings(findings, "sweep-1")[0][-1].id == digest.id


def test_an_owner_with_many_idle_instances_gets_digests_that_each_fit_one_slack_message() -> None:
    findings = [warning(f"i-{n:03d}", "ana@demo.example", float(n)) for n in range(MAX_MEMBERS * 2 + 3)]
    out, _ = digest_warnings(findings, "sweep-1")
    digests = [f for f in out if f.rule == DIGEST_RULE]
    assert [len(d.members) for d in digests] == [MAX_MEMBERS, MAX_MEMBERS, 3]
    assert digests[0].members[0].resource == f"i-{MAX_MEMBERS * 2 + 2:03d}"  # the dearest first across digests


def _runtime(**interactions: Any) -> Runtime:
    policy = parse_policy(
        {
            "notifications": {"enforce": True, "immediate": "actionable"},
            "interactions": {"buttons": True, "slack_users": {"U0ANA": "ana@demo.example"}, **interactions},
        }
    )
    return Runtime(policy=policy, ledger=MemoryLedger(), sink=MemorySink(), dead_letters=MemoryDeadLetters())


def _event(f: Finding) -> dict[str, Any]:
    return finding_event(f.model_dump(mode="json"), event_id=f"e-{f.id}", time=NOW.isoformat())


def test_the_notifier_posts_one_message_per_digest_with_each_instances_own_buttons() -> None:
    findings = [
        warning(f"i-{n:02d}", "ana@demo.example", float(n), planned="report" if n == 3 else "stop")
        for n in range(MAX_MEMBERS)
    ]
    out, _ = digest_warnings(findings, "sweep-1")
    rt, outbox = _runtime(), FakeOutbox()
    statuses = [handle(_event(f), rt, outbox, NOW)["status"] for f in out]
    assert statuses == ["not-sent"] * MAX_MEMBERS + ["sent"]
    assert len(outbox.slack) == 1
    ((_, messages),) = outbox.slack
    assert len(messages) == 1 and len(messages[0]["blocks"]) <= MAX_BLOCKS
    blocks = messages[0]["blocks"]
    text = str(blocks)
    assert "<@U0ANA>" in text  # the owner is pinged once, in the digest
    actions = [b for b in blocks if b["type"] == "actions"]
    assert len(actions) == MAX_MEMBERS
    tokens = {b["elements"][0]["value"] for b in actions}
    assert len(tokens) == MAX_MEMBERS  # each instance its own token ...
    records = {token: rt.ledger.get_item(BUTTON_KIND, token) for token in tokens}
    assert {r["resource"] for r in records.values() if r} == {f"i-{n:02d}" for n in range(MAX_MEMBERS)}
    # ... and the report-only instance (planned: report) has no Stop now
    for block in actions:
        resource = (records[block["elements"][0]["value"]] or {}).get("resource")
        ids = [e["action_id"] for e in block["elements"]]
        assert (STOP_NOW in ids) == (resource != "i-03")
    # the dearest instance is listed first
    sections = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    assert "i-19" in sections[1] and "$19.00/h" in sections[1]
    # within Slack's total size for a message's blocks (msg_blocks_too_long at ~13,000 characters); keep said once
    assert sum(len(section) for section in sections) < 12_000
    assert text.count("To keep") == 1
    # every member's own finding is recorded as sent inside the digest
    rules = [d.rule for _, d in rt.ledger.decisions]  # type: ignore[attr-defined]
    assert rules.count("notifications.in-owner-digest") == MAX_MEMBERS


def test_the_registry_names_idle_s_episode_starting_rules() -> None:
    """The notifier threads an idle episode's later findings into the message its warning opened: the rules it keys
    on are declared in the registry (issue 34: no other module names the capability) and must be idle.digest's."""
    from governor.idle.digest import DIGEST_RULE, WARNED_RULE
    from governor.registry import REGISTRY

    assert REGISTRY["idle"].episode_starts == {WARNED_RULE, DIGEST_RULE}
    assert all(not c.episode_starts for name, c in REGISTRY.items() if name != "idle")
