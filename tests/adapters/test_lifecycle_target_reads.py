"""Organisation mode (issue 50): each target's daily reconcile reads its own open sessions, not the organisation's.

The rounds run through the real planner, targets queue and lifecycle handler on moto (the fixture of
``test_org_lifecycle``); the ledger's DynamoDB client is wrapped to count the open-session items each target reads.
The first round after the upgrade still reads the organisation's open sessions once (items written before they were
stamped with their target); its writes stamp them, and every later round reads each target's partition only.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from governor.lifecycle import domain
from governor.lifecycle import handler as lifecycle
from governor_cli.testing import events
from tests.adapters.test_org_fanout import HUB, REGIONS, Org, launch
from tests.adapters.test_org_fanout import _clock_at_test_start as _clock_at_test_start  # autouse: fresh NOW
from tests.adapters.test_org_lifecycle import open_sessions, seed_open, session_in
from tests.adapters.test_org_lifecycle import org as org  # the fixture: hub + one member in the round, 2 regions
from tests.adapters.test_spot_moto import LambdaContext

OTHERS = 200  # open sessions of the organisation's other targets (accounts not in this round)


class CountingClient:
    """The ledger's DynamoDB client, counting the open-session items each Query and BatchGetItem returns."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.read: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def query(self, **kwargs: Any) -> dict[str, Any]:
        page: dict[str, Any] = self._inner.query(**kwargs)
        self.read[str(kwargs["ExpressionAttributeValues"][":kind"]["S"])] += len(page.get("Items", []))
        return page

    def batch_get_item(self, **kwargs: Any) -> dict[str, Any]:
        answer: dict[str, Any] = self._inner.batch_get_item(**kwargs)
        for rows in answer.get("Responses", {}).values():
            for row in rows:
                self.read[str(row.get("kind", {}).get("S"))] += 1
        return answer


def _seed_other_targets(org: Org) -> None:
    """Open sessions this version's state-change handling left in accounts outside the round: stamped."""
    for n in range(OTHERS):
        account, region = f"{200000000000 + n % 40}", REGIONS[n % 2]
        seed_open(org, f"i-{n:017x}", account=account, region=region)
        item = org.runtime.ledger.get_item(domain.OPEN_SESSION, f"i-{n:017x}")
        assert item is not None
        org.runtime.ledger.put_item(domain.OPEN_SESSION, f"i-{n:017x}", {**item, "target": f"{account}#{region}"})


def _round(org: Org, event_id: str) -> tuple[list[dict[str, Any]], int]:
    counting = CountingClient(org.runtime.ledger._client)  # type: ignore[attr-defined]
    org.runtime.ledger._client = counting  # type: ignore[attr-defined]
    try:
        planned = lifecycle.lambda_handler(org.schedule(event_id), LambdaContext())  # type: ignore[arg-type]
        assert planned["targets"] == 4
        return org.drain(lifecycle.lambda_handler), counting.read[domain.OPEN_SESSION]
    finally:
        org.runtime.ledger._client = counting._inner  # type: ignore[attr-defined]


def _state_change(account: str, region: str, instance_id: str, state: str) -> dict[str, Any]:
    detail = {"instance-id": instance_id, "state": state}
    return events.envelope(domain.STATE_CHANGE, "aws.ec2", detail, account=account, region=region)


def test_after_the_first_round_each_target_reads_only_its_own_open_sessions(org: Org) -> None:
    member = org.members[0]
    _seed_other_targets(org)
    seed_open(org, legacy := "i-0ffffffffffffffaa", account=member, region=REGIONS[1])  # written before the stamp
    first, read_first = _round(org, "round-1")  # the upgrade's round: every open session once, stamps its own
    assert sorted(r["closed"] for r in first) == [0, 0, 0, 1]  # the legacy stale session, closed by its target
    assert read_first >= 4 * OTHERS

    ec2 = session_in(member, REGIONS[1]).client("ec2")
    started = launch(session_in(member, REGIONS[1]), util=90.0)
    answer = lifecycle.lambda_handler(_state_change(member, REGIONS[1], started, "running"), LambdaContext())
    assert answer["status"] == "done"
    ec2.terminate_instances(InstanceIds=[started])  # its stop event is missed: the next reconcile must close it
    running = {launch(session_in(a, r), util=90.0) for a in (HUB, member) for r in REGIONS}

    second, read_second = _round(org, "round-2")

    assert sorted(r["closed"] for r in second) == [0, 0, 0, 1]  # the missed stop, found in its target's partition
    assert sorted(r["opened"] for r in second) == [1, 1, 1, 1]
    own = sum(r["running"] for r in first) + len(running) + 1  # what the four targets wrote of their own
    assert read_second <= own  # never the other targets' 200 open sessions, in any of the four targets
    still = open_sessions(org)
    assert started not in still and legacy not in still
    assert running <= set(still) and {f"i-{n:017x}" for n in range(OTHERS)} <= set(still)
    for instance_id in running:
        assert still[instance_id]["target"] == f"{still[instance_id]['account']}#{still[instance_id]['region']}"


def test_a_session_written_before_the_stamp_of_a_running_instance_is_stamped_and_found_later(org: Org) -> None:
    member = org.members[0]
    instance_id = launch(session_in(member, REGIONS[0]), util=90.0)
    seed_open(org, instance_id, account=member, region=REGIONS[0])  # written before the stamp

    _round(org, "round-1")
    stamped = open_sessions(org)[instance_id]
    second, _ = _round(org, "round-2")

    assert stamped["target"] == f"{member}#{REGIONS[0]}"  # the first round's refresh stamped it
    assert sum(r["opened"] for r in second) == 0 and sum(r["closed"] for r in second) == 0
    sessions = [s for s in org.runtime.ledger.query_kind(domain.SESSION) if s["instance_id"] == instance_id]
    assert [s["end"] for s in sessions].count(None) == 1  # still one open session: never opened twice


def test_a_target_first_reconciled_reads_the_organisation_once(org: Org) -> None:
    _seed_other_targets(org)

    _, first = _round(org, "round-1")
    _, second = _round(org, "round-2")

    assert first >= 4 * OTHERS and second == 0
