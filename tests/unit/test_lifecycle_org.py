"""Lifecycle sessions in organisation mode (issue 23): every session says where its instance runs, and a fanned-out
reconcile of one account and region closes and refreshes only that target's sessions, never another account's."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from governor.domain.costs import PriceBook
from governor.lifecycle import domain
from governor.lifecycle.handler import Adapters, handle
from tests.unit.test_lifecycle_handler import World, gpu, make_world, scheduled, state_event

HUB, MEMBER_A, MEMBER_B = "111111111111", "222222222222", "333333333333"
HOME = (HUB, "us-east-1")
START = "2026-12-01T08:00:00+00:00"


def open_item(instance_id: str, **where: str) -> dict[str, Any]:
    return {
        "session_key": f"{instance_id}#{START}",
        "instance_id": instance_id,
        "instance_type": "g5.xlarge",
        "start": START,
        "team": "vision",
        "open": True,
        **where,
    }


def seed(world: World, *items: dict[str, Any]) -> None:
    for item in items:
        world.ledger.put_item(domain.SESSION, item["session_key"], {k: v for k, v in item.items() if k != "open"})
        world.ledger.put_item(domain.OPEN_SESSION, item["instance_id"], item)


def reconcile_in(world: World, account: str, region: str, *, home: tuple[str, str] | None = HOME) -> dict[str, Any]:
    """One fan-out target's reconcile: its Scheduled Event names the account and region, its runtime the region."""
    caps = Adapters(
        reader=world.ec2,
        tagger=world.ec2,
        prices=PriceBook(world.runtime.policy.pricing),
        now=lambda: world.clock[0],
        home=home,
    )
    event = {**scheduled(f"sched-{account}-{region}"), "account": account, "region": region}
    return handle(event, replace(world.runtime, region=region), caps)


def still_open(world: World) -> set[str]:
    return {str(o["instance_id"]) for o in world.ledger.query_kind(domain.OPEN_SESSION) if o.get("open")}


def test_a_targets_sessions_are_its_own_place_or_its_running_instances() -> None:
    items = [
        open_item("i-0000000000000000a", account=MEMBER_A, region="us-east-1"),
        open_item("i-0000000000000000b", account=MEMBER_B, region="us-east-1"),
        open_item("i-0000000000000000c", account=MEMBER_A, region="us-west-2"),
        open_item("i-0000000000000000d"),  # written before sessions carried a place: the hub's
        open_item("i-0000000000000000e", region="us-east-1"),  # a region only: the hub's account
        open_item("i-0000000000000000f", account=MEMBER_B, region="us-west-2"),  # but it runs in A now (see below)
    ]

    def ids(account: str, region: str, running: tuple[str, ...] = ()) -> list[str]:
        return [str(i["instance_id"])[-1] for i in domain.target_sessions(items, running, account, region, HOME)]

    assert ids(MEMBER_A, "us-east-1") == ["a"]
    assert ids(MEMBER_A, "us-west-2") == ["c"]
    assert ids(HUB, "us-east-1") == ["d", "e"]
    assert ids(HUB, "eu-west-1") == []
    assert ids(MEMBER_A, "us-east-1", ("i-0000000000000000f",)) == ["a", "f"]  # instance ids are unique


def test_a_members_reconcile_closes_only_its_own_stale_sessions() -> None:
    world = make_world()
    seed(
        world,
        open_item("i-0000000000000000a", account=MEMBER_A, region="us-east-1"),
        open_item("i-0000000000000000b", account=MEMBER_B, region="us-east-1"),
        open_item("i-0000000000000000c", account=MEMBER_A, region="us-west-2"),
        open_item("i-0000000000000000d"),
    )

    result = reconcile_in(world, MEMBER_A, "us-east-1")  # A sees no running instance in us-east-1

    assert (result["closed"], result["opened"]) == (1, 0)
    assert still_open(world) == {"i-0000000000000000b", "i-0000000000000000c", "i-0000000000000000d"}
    (closed,) = [s for s in world.sessions() if s.get("end")]
    assert (closed["instance_id"], closed["account"], closed["region"]) == (
        "i-0000000000000000a",
        MEMBER_A,
        "us-east-1",
    )
    assert closed["closed_by"] == "reconcile"

    reconcile_in(world, HUB, "us-east-1")  # the hub's target owns what was recorded without a place
    assert still_open(world) == {"i-0000000000000000b", "i-0000000000000000c"}
    (legacy,) = [s for s in world.sessions() if s["instance_id"] == "i-0000000000000000d"]
    assert (legacy["account"], legacy["region"]) == HOME


def test_a_reconcile_opens_sessions_stamped_with_its_target_and_refreshes_only_its_own() -> None:
    world = make_world()
    world.ec2.by_id["i-0000000000000000a"] = gpu("i-0000000000000000a")
    world.ec2.by_id["i-00000000000000001"] = gpu("i-00000000000000001")
    seed(
        world,
        open_item("i-0000000000000000a", account=MEMBER_A, region="us-west-2"),
        open_item("i-0000000000000000b", account=MEMBER_B, region="us-west-2"),
    )

    result = reconcile_in(world, MEMBER_A, "us-west-2")

    assert (result["opened"], result["closed"]) == (1, 0)
    (opened,) = [s for s in world.sessions() if s["instance_id"] == "i-00000000000000001"]
    assert (opened["account"], opened["region"], opened["opened_by"]) == (MEMBER_A, "us-west-2", "reconcile")
    item = world.ledger.get_item(domain.OPEN_SESSION, "i-00000000000000001")
    assert item is not None and (item["account"], item["region"]) == (MEMBER_A, "us-west-2")
    assert still_open(world) == {"i-0000000000000000a", "i-0000000000000000b", "i-00000000000000001"}


def test_a_single_account_reconcile_still_closes_every_stale_session() -> None:
    world = make_world()
    seed(world, open_item("i-0000000000000000a"), open_item("i-0000000000000000b", account=MEMBER_A))

    result = reconcile_in(world, "123837392027", "us-east-1", home=None)

    assert result["closed"] == 2 and still_open(world) == set()


def test_state_changes_record_the_events_account_and_region_on_every_session_item() -> None:
    world = make_world()
    instance_id = "i-0aaaaaaaaaaaaaaa1"
    world.ec2.by_id[instance_id] = gpu(instance_id)
    running = {
        **state_event("running", "2026-12-01T08:00:00Z", instance_id),
        "account": MEMBER_B,
        "region": "eu-west-1",
    }

    world.send(running)

    (session,) = world.sessions()
    assert (session["account"], session["region"]) == (MEMBER_B, "eu-west-1")
    item = world.ledger.get_item(domain.OPEN_SESSION, instance_id)
    assert item is not None and (item["account"], item["region"]) == (MEMBER_B, "eu-west-1")

    stopped = {
        **state_event("stopped", "2026-12-01T10:00:00Z", instance_id),
        "account": MEMBER_B,
        "region": "eu-west-1",
    }
    world.clock[0] = dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC)
    world.send(stopped)

    (closed,) = world.sessions()
    assert closed["end"] and (closed["account"], closed["region"]) == (MEMBER_B, "eu-west-1")
    item = world.ledger.get_item(domain.OPEN_SESSION, instance_id)
    assert item is not None and not item["open"] and item["account"] == MEMBER_B
