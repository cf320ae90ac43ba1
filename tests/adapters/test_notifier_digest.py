"""Issue 48: a channel gets one digest per period, not a post per finding; through the notifier handler with its
ledger on DynamoDB (moto), under the shipped policy (``notifications.immediate: due``, ``digest_hours: 8``)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from governor.adapters.ledger import DynamoLedger
from governor.notifier.handler import handle
from governor.policy import load_policy
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_ledger_table
from governor_cli.testing.events import finding, scheduled
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink
from tests.conftest import ROOT
from tests.unit.test_notify_handler import FakeOutbox

NOW = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC)
TICK = dt.datetime(2026, 11, 20, 16, 0, tzinfo=dt.UTC)
VISION = "governor/slack-vision"


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    """The shipped governor.yaml, delivering, with one team on a channel of its own."""
    shipped = load_policy(ROOT / "governor.yaml")
    routes = {"vision": {"slack_secret_name": VISION}}
    notifications = shipped.notifications.model_validate(
        {**shipped.notifications.model_dump(), "enforce": True, "teams": routes}
    )
    policy = shipped.model_copy(update={"notifications": notifications})
    with mock_aws():
        create_ledger_table("ledger")
        ledger = DynamoLedger("ledger", region="us-east-1")
        yield Runtime(policy=policy, ledger=ledger, sink=MemorySink(), dead_letters=MemoryDeadLetters())


def _finding(n: int, at: dt.datetime, **detail: Any) -> dict[str, Any]:
    body = {
        "policy": "network",
        "rule": "network.world-open",
        "severity": "critical",
        "resource": f"sg-{n:04d}",
        "title": f"Security group sg-{n:04d} opened port 22 to the world",
        "owner": "ana@example.com",
        "team": "vision",
        "at": at.isoformat(),
        **detail,
    }
    return finding(body, event_id=f"e-{n}-{at:%H%M}", time=at.isoformat())


def _day(runtime: Runtime, outbox: FakeOutbox) -> None:
    """Twelve world-open groups of team vision (one found five more times), four old keys on the default channel, a
    warning withdrawn because its instance works again, and one Spot interruption warning."""
    for n in range(12):
        handle(_finding(n, NOW), runtime, outbox, NOW)
    for m in range(1, 6):
        later = NOW + dt.timedelta(minutes=15 * m)
        handle(_finding(0, later), runtime, outbox, later)
    for n in range(4):
        key = {"policy": "keys", "rule": "keys.old", "severity": "warning", "team": None, "owner": None}
        handle(_finding(100 + n, NOW, **key, title=f"Access key AKIA{n} is 120 days old"), runtime, outbox, NOW)
    resumed = {"policy": "idle", "rule": "idle.resumed", "severity": "info", "resource": "i-0abc", "team": None}
    handle(_finding(200, NOW, **resumed, title="i-0abc is busy again: idle warning withdrawn"), runtime, outbox, NOW)
    spot = {"policy": "spot", "rule": "spot.interruption", "severity": "critical", "resource": "i-0spot"}
    handle(_finding(300, NOW, **spot, title="Spot interruption warning for i-0spot"), runtime, outbox, NOW)


def _tick(at: dt.datetime = TICK) -> dict[str, Any]:
    return scheduled({"kind": "digest"}, event_id=f"tick-{at:%H%M}", time=at, account="123456789012")


def test_a_day_of_findings_is_one_digest_per_channel_with_repeats_counted_and_fixes_listed(
    runtime: Runtime,
) -> None:
    outbox = FakeOutbox()
    _day(runtime, outbox)
    assert [json.dumps(m) for _, m in outbox.slack] == [json.dumps(outbox.slack[0][1])]  # the Spot warning alone
    assert "i-0spot" in json.dumps(outbox.slack[0][1])

    result = handle(_tick(), runtime, outbox, TICK)

    assert result["status"] == "digest-posted"
    digests = dict(outbox.slack[1:])
    assert set(digests) == {"governor/slack-webhook", VISION} and len(outbox.slack) == 3
    vision = json.dumps(digests[VISION])
    assert all(f"sg-{n:04d}" in vision for n in range(12)) and "(6 times)" in vision
    assert len(digests[VISION]) == 1 and len(digests[VISION][0]["blocks"]) <= 50
    default = json.dumps(digests["governor/slack-webhook"])
    assert "AKIA3" in default and "Fixed or done since the last digest" in default and "i-0abc" in default

    handle(_tick(TICK + dt.timedelta(hours=8)), runtime, outbox, TICK + dt.timedelta(hours=8))
    assert len(outbox.slack) == 3  # nothing new held: no empty digest


def test_a_digest_that_fails_on_one_channel_is_posted_by_the_retry_and_the_other_channel_not_twice(
    runtime: Runtime,
) -> None:
    outbox = FakeOutbox()
    _day(runtime, outbox)
    real = outbox.post_slack

    def vision_down(secret: str, messages: Any) -> None:
        if secret == VISION:
            raise ConnectionError("Slack 503")
        real(secret, messages)

    outbox.post_slack = vision_down  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="Slack 503"):  # the tick fails: the Scheduler retries it
        handle(_tick(), runtime, outbox, TICK)
    outbox.post_slack = real  # type: ignore[method-assign]
    handle(_tick(), runtime, outbox, TICK)  # the Scheduler's retry of the same tick

    posted = [secret for secret, _ in outbox.slack[1:]]
    assert sorted(posted) == sorted(["governor/slack-webhook", VISION])  # each once: nothing lost, nothing twice
    assert all(f"sg-{n:04d}" in json.dumps(outbox.slack[-1][1]) for n in range(12))
