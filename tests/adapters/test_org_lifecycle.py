"""The lifecycle reconcile fanned out over accounts and regions (issue 23) on moto: each target opens sessions for
the GPU instances running there (read through the spoke role in a member account) and closes only its own stale
sessions; another account's sessions, and those of an account outside the round, stay as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor import fanout
from governor.adapters.aws import Organization, client
from governor.lifecycle import domain
from governor.lifecycle import handler as lifecycle
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.demo.emulator import filter_wildcards
from governor_cli.testing.memory import MemoryDeadLetters, MemorySink
from tests.adapters.org_accounts import account_session
from tests.adapters.test_org_fanout import HUB, NOW, REGIONS, Org, launch
from tests.adapters.test_spot_moto import LambdaContext

START = (NOW.replace(hour=0, minute=0)).isoformat()


@pytest.fixture
def org(monkeypatch: pytest.MonkeyPatch) -> Iterator[Org]:
    """The hub and one member account of the OU in the round (2 accounts x 2 regions); the OU's other member is
    left out of it, so its sessions must survive every target's reconcile."""
    with mock_aws(), filter_wildcards():  # the emulator matches wildcard filter values as AWS does
        client.cache_clear()
        lifecycle.default_capabilities.cache_clear()
        built = Org()
        built.config = built.config.model_copy(update={"accounts": (built.members[0],), "ou_ids": ()})
        built.runtime = Runtime(
            policy=parse_policy({}),
            ledger=built.runtime.ledger,
            sink=MemorySink(),
            dead_letters=MemoryDeadLetters(),
            region=REGIONS[0],
            extras={"fanout": built.config},
        )
        monkeypatch.setenv("IDEMPOTENCY_TABLE", built.local.idempotency_table)
        client.configure(Organization("GovernorSpoke", HUB))
        monkeypatch.setattr(lifecycle, "default_runtime", lambda: built.runtime)
        yield built
        client.configure(None)
        lifecycle.default_capabilities.cache_clear()
    client.cache_clear()


def session_in(account: str, region: str) -> boto3.session.Session:
    return boto3.session.Session(region_name=region) if account == HUB else account_session(account, region)


def seed_open(org: Org, instance_id: str, **where: str) -> None:
    """An open session as the lifecycle function leaves it (``where`` empty: written before sessions had a place)."""
    item: dict[str, Any] = {
        "session_key": f"{instance_id}#{START}",
        "instance_id": instance_id,
        "instance_type": "g5.xlarge",
        "start": START,
        "end": None,
        "team": "vision",
        "owner": "ana@example.com",
        **where,
    }
    org.runtime.ledger.put_item(domain.SESSION, item["session_key"], item)
    org.runtime.ledger.put_item(domain.OPEN_SESSION, instance_id, {**item, "open": True})


def open_sessions(org: Org) -> dict[str, dict[str, Any]]:
    return {str(o["instance_id"]): o for o in org.runtime.ledger.query_kind(domain.OPEN_SESSION) if o.get("open")}


def test_a_reconcile_over_2_accounts_and_2_regions_keeps_to_each_targets_sessions(org: Org) -> None:
    member, outsider = org.members
    swept = [(account, region) for account in (HUB, member) for region in REGIONS]
    running = {launch(session_in(account, region), util=90.0): (account, region) for account, region in swept}
    stale = {f"i-{n:017x}": target for n, target in enumerate(swept, start=1)}
    for instance_id, (account, region) in stale.items():
        seed_open(org, instance_id, account=account, region=region)  # its stop event was missed
    seed_open(org, legacy := "i-000000000000000aa")  # no place: the hub's own account and region
    seed_open(org, elsewhere := "i-000000000000000bb", account=outsider, region=REGIONS[0])

    planned = lifecycle.lambda_handler(org.schedule(), LambdaContext())  # type: ignore[arg-type]
    results = org.drain(lifecycle.lambda_handler)

    assert (planned["status"], planned["sweep"], planned["targets"]) == ("planned", "lifecycle", 4)
    assert sorted((r["status"], r["running"], r["opened"]) for r in results) == [("done", 1, 1)] * 4
    assert sorted(r["closed"] for r in results) == [1, 1, 1, 2]  # the hub's first region also closes the legacy one
    still = open_sessions(org)
    assert set(still) == {*running, elsewhere}  # every stale session closed by its own target, the outsider's kept
    for instance_id, where in running.items():
        assert (still[instance_id]["account"], still[instance_id]["region"]) == where
        assert still[instance_id]["opened_by"] == "reconcile"
    sessions = {str(s["session_key"]): s for s in org.runtime.ledger.query_kind(domain.SESSION)}
    for instance_id, where in {**stale, legacy: (HUB, REGIONS[0])}.items():
        closed = sessions[f"{instance_id}#{START}"]
        assert closed["end"] and closed["closed_by"] == "reconcile"
        assert (closed["account"], closed["region"]) == where
    assert sessions[f"{elsewhere}#{START}"]["end"] is None
    assert client.roles_assumed >= 2  # the member's two regions through its spoke role
    assert not [f for f in org.runtime.sink.findings if f.rule == fanout.SWEEP_FAILED]


def test_without_the_fan_out_the_reconcile_runs_once_in_the_hub(org: Org) -> None:
    org.runtime.extras.clear()
    client.configure(None)  # a single-account deployment
    instance_id = launch(session_in(HUB, REGIONS[0]), util=90.0)
    seed_open(org, stale := "i-000000000000000cc", account=org.members[0], region=REGIONS[1])

    result = lifecycle.lambda_handler(org.schedule(), LambdaContext())  # type: ignore[arg-type]

    assert (result["status"], result["running"], result["opened"], result["closed"]) == ("done", 1, 1, 1)
    assert set(open_sessions(org)) == {instance_id} and stale not in open_sessions(org)
