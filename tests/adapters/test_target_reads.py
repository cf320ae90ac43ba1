"""Organisation mode (issue 50): each target's idle sweep reads its own marks, not every mark of the organisation.

The round runs through the real planner, targets queue and idle handler on moto (the fixture of
``test_org_fanout``); the ledger's DynamoDB client is wrapped to count the items each Query returns, by kind.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.aws import Organization, client
from governor.domain.decision import Decision, Finding
from governor.domain.fleet import KEEP_KIND
from governor.fanout import TargetLedger
from governor.idle import handler as idle
from governor.idle.carry_out import mark_item
from governor.idle.domain import MARK_KIND, Mark
from governor.outbox import OUTBOX_KIND, Outbox
from governor_cli.demo.emulator import filter_wildcards
from tests.adapters.org_accounts import account_session
from tests.adapters.test_org_fanout import HUB, REGIONS, Org, launch
from tests.adapters.test_org_fanout import _clock_at_test_start as _clock_at_test_start  # autouse: fresh NOW
from tests.adapters.test_spot_moto import LambdaContext

OTHERS = 300  # marks the organisation's other targets wrote (accounts not in this round)


@pytest.fixture
def org(monkeypatch: pytest.MonkeyPatch) -> Iterator[Org]:
    """The hub and two member accounts, two regions, the idle function's targets queue (as ``test_org_fanout``)."""
    with mock_aws(), filter_wildcards():
        client.cache_clear()
        built = Org()
        monkeypatch.setenv("IDEMPOTENCY_TABLE", built.local.idempotency_table)
        client.configure(Organization("GovernorSpoke", HUB, "idle"))
        monkeypatch.setattr(idle, "default_runtime", lambda: built.runtime)
        yield built
        client.configure(None)
    client.cache_clear()


class CountingClient:
    """The ledger's DynamoDB client, counting the items each Query returns by the kind it asked for."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.items: Counter[str] = Counter()
        self.queries: Counter[str] = Counter()
        self.by_index: Counter[tuple[str, str]] = Counter()  # (index, kind): the items returned

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def query(self, **kwargs: Any) -> dict[str, Any]:
        page: dict[str, Any] = self._inner.query(**kwargs)
        kind = str(kwargs["ExpressionAttributeValues"][":kind"]["S"])
        self.items[kind] += len(page.get("Items", []))
        self.queries[kind] += 1
        self.by_index[(str(kwargs.get("IndexName")), kind)] += len(page.get("Items", []))
        return page


def _seed_other_targets(org: Org, now: dt.datetime) -> None:
    """Marks as the other targets' sweeps (this version or the one before) left them: stamped with their target."""
    items = []
    for n in range(OTHERS):
        body = mark_item(f"i-{n:017x}", Mark(idle_since=now - dt.timedelta(hours=1)), now)
        items.append((MARK_KIND, f"i-{n:017x}", {**body, "target": f"{200000000000 + n % 50}#{REGIONS[n % 2]}"}))
        until = (now + dt.timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M:%SZ")  # a Keep clicked at the hub: unstamped
        items.append((KEEP_KIND, f"i-{n:017x}", {"instance_id": f"i-{n:017x}", "until": until, "by": "ana"}))
        sent = {"finding_id": f"f-{n}", "policy": "idle", "sent_at": now.isoformat(), "event_id": f"e-{n}"}
        items.append((OUTBOX_KIND, f"f-{n}", {**sent, "target": f"{200000000000 + n % 50}#{REGIONS[n % 2]}"}))
    org.runtime.ledger.put_many(items)


def _left_unsent_at_the_hub(org: Org, now: dt.datetime) -> str:
    """A finding a hub invocation (a click) staged ten minutes ago and never got out: unstamped, stale."""
    decision = Decision(
        policy="idle", verdict="act", resource="i-0aaaaaaaaaaaaaaaa", reasons=["stop now clicked"], rule="idle.stopped"
    )
    box = Outbox(org.runtime.ledger, org.runtime.sink, event_id="click-1", clock=lambda: now - dt.timedelta(minutes=10))
    (staged,) = box.add([Finding.from_decision(decision, "Stopped", account=HUB, event_id="click-1")])
    assert staged.id is not None
    return staged.id


def test_each_target_reads_only_its_own_marks(org: Org) -> None:
    now = dt.datetime.now(dt.UTC)
    _seed_other_targets(org, now)
    unsent = _left_unsent_at_the_hub(org, now)
    launched = {}
    for account in org.accounts:
        for region in REGIONS:
            session = boto3.session.Session(region_name=region) if account == HUB else account_session(account, region)
            launched[(account, region)] = launch(session, util=0.0)  # idle: each target writes a mark of its own
    kept = launched[(org.members[1], REGIONS[0])]
    until = (now + dt.timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    org.runtime.ledger.put_item(KEEP_KIND, kept, {"instance_id": kept, "until": until, "by": "ana"})
    counting = CountingClient(org.runtime.ledger._client)
    org.runtime.ledger._client = counting  # type: ignore[attr-defined]

    idle.lambda_handler(org.schedule(), LambdaContext())
    results = org.drain()

    assert sorted(r["status"] for r in results) == ["swept"] * 6
    assert counting.queries[MARK_KIND] == 6  # one mark query per target
    # each target reads at most its own mark (none on a first round): never the other targets' 300
    assert counting.items[MARK_KIND] <= 6
    assert counting.items[KEEP_KIND] == 0  # report-only keeps: read by the target's instance ids, not queried
    # the outbox's stale entries: the planner reads them once a round, each target only its own
    assert counting.queries[OUTBOX_KIND] == 7 and counting.items[OUTBOX_KIND] < 2 * OTHERS
    assert unsent in {f.id for f in org.runtime.sink.findings}  # what the hub left unsent still goes out
    decided = {d["resource"]: d for d in org.runtime.ledger.query_kind("decision") if d.get("policy") == "idle"}
    assert sorted(decided) == sorted(launched.values())
    assert decided.pop(kept)["rule"] == "idle.snoozed"  # the Keep clicked at the hub still spares its instance
    assert {d["rule"] for d in decided.values()} == {"idle.warned"}
    own = TargetLedger(org.runtime.ledger, org.members[0], REGIONS[1]).query_kind(MARK_KIND)
    assert [i["target"] for i in own] == [f"{org.members[0]}#{REGIONS[1]}"]  # the mark its sweep wrote, its only one


def test_a_mark_the_previous_version_wrote_is_still_read(org: Org) -> None:
    """Items the previous version wrote carry ``target`` already: the by-target index holds them, nothing migrates."""
    now = dt.datetime.now(dt.UTC)
    _seed_other_targets(org, now)
    mine = f"{HUB}#{REGIONS[0]}"
    body = mark_item("i-0123456789abcdef0", Mark(idle_since=now - dt.timedelta(hours=2)), now)
    org.runtime.ledger.put_item(MARK_KIND, "i-0123456789abcdef0", {**body, "target": mine})

    (found,) = TargetLedger(org.runtime.ledger, HUB, REGIONS[0]).query_kind(MARK_KIND)

    assert found["instance_id"] == "i-0123456789abcdef0" and found["idle_since"] == body["idle_since"]


INTENT = "action-intent"  # governor.acts.INTENT_KIND


def _revoke(group: str) -> Decision:
    from governor.network.actions import RevokeIngress

    action = RevokeIngress(enforced=True, group_id=group, rule_ids=["sgr-1"])
    return Decision(policy="network", verdict="act", resource=group, actions=[action], reasons=["SSH open"])


def _acted_unrecorded(org: Org, group: str, event_id: str, now: dt.datetime, origin: tuple[str, str] | None) -> None:
    """A network revoke in a member account whose invocation recorded the outcome but ended before completing its
    decision: its intent left open ten minutes ago, as the network function (not a target) writes it; with
    ``origin`` None, as the previous version wrote it (no owning target)."""
    from governor import acts
    from governor.domain.actions import Outcome
    from governor.domain.ports import handling_event_from

    decision = _revoke(group)
    ledger = org.runtime.ledger
    with handling_event_from(*(origin or (org.members[0], REGIONS[0]))):
        ledger.record(decision, event_id=event_id)
    if origin is None:
        body = {
            "policy": "network",
            "resource": group,
            "event_id": event_id,
            "action": decision.actions[0].model_dump(),
            "decision": decision.model_dump(mode="json"),
            "intended_at": (now - dt.timedelta(minutes=10)).isoformat(),
            "order": 0,
            "account": org.members[0],
            "region": REGIONS[0],
        }
        ledger.put_item(INTENT, acts.action_key(decision, event_id, decision.actions[0]), body)
    else:
        with handling_event_from(*origin):
            acts.Intents(ledger, decision, event_id, now - dt.timedelta(minutes=10)).intend(decision.actions[0])
    done = acts.outcome_item(decision, decision.actions[0], Outcome(ok=True, done="ingress revoked"), event_id)
    ledger.put_item("action", acts.action_key(decision, event_id, decision.actions[0]), done)


def test_each_target_repairs_its_own_act_records_without_reading_the_organisations(org: Org) -> None:
    """Issue 50: a target's repair of open act records reads its own intents (the ``by-target`` index), not every
    intent of the organisation's last seven days; an event-driven function's open intent is still repaired by the
    target of its account and region, and one no target owns (the previous version's) once a round by the planner."""
    now = dt.datetime.now(dt.UTC)
    others = []
    for n in range(OTHERS):  # acts the organisation's other targets made and completed this week
        decision = _revoke(f"sg-{n:017x}")
        body = {"policy": "network", "resource": decision.resource, "event_id": f"e-{n}", "order": 0,
                "action": decision.actions[0].model_dump(), "decision": decision.model_dump(mode="json"),
                "intended_at": now.isoformat(), "completed_at": now.isoformat(),
                "account": f"{200000000000 + n % 50}", "region": REGIONS[n % 2],
                "target": f"{200000000000 + n % 50}#{REGIONS[n % 2]}"}  # fmt: skip
        others.append((INTENT, f"{decision.resource}#e-{n}#revoke_ingress", body))
    org.runtime.ledger.put_many(others)
    _acted_unrecorded(org, "sg-0aaaaaaaaaaaaaaa1", "ct-owned", now, (org.members[1], REGIONS[1]))
    _acted_unrecorded(org, "sg-0aaaaaaaaaaaaaaa2", "ct-legacy", now, None)
    for account in org.accounts:
        for region in REGIONS:
            session = boto3.session.Session(region_name=region) if account == HUB else account_session(account, region)
            launch(session, util=70.0)
    counting = CountingClient(org.runtime.ledger._client)
    org.runtime.ledger._client = counting  # type: ignore[attr-defined]

    idle.lambda_handler(org.schedule(), LambdaContext())
    results = org.drain()

    assert sorted(r["status"] for r in results) == ["swept"] * 6
    # the six targets read their own intents: one open between them, never the other targets' 300 each
    assert counting.items[INTENT] < 2 * OTHERS and counting.queries[INTENT] == 7
    assert counting.by_index[("by-kind", INTENT)] <= OTHERS + 2  # the planner's one read a round
    for group, event_id in (("sg-0aaaaaaaaaaaaaaa1", "ct-owned"), ("sg-0aaaaaaaaaaaaaaa2", "ct-legacy")):
        (decision,) = [
            d for d in org.runtime.ledger.query_kind("decision") if d["resource"] == group and d["event_id"] == event_id
        ]
        assert decision["evidence"]["done"] == ["ingress revoked"]  # repaired: the act is in its decision
        assert (decision.get("account"), decision.get("region")) == (  # where it was made, whoever repaired it
            (org.members[1], REGIONS[1]) if event_id == "ct-owned" else (org.members[0], REGIONS[0])
        )
        intent = org.runtime.ledger.get_item(INTENT, f"{group}#{event_id}#revoke_ingress")
        assert intent is not None and intent.get("completed_at")
