"""One fact, one figure: the record of a resource decided once (``governor.domain.facts``), on plain ledger items."""

from __future__ import annotations

import datetime as dt

from governor.domain import facts
from governor.domain.costs import EffectiveRate, PriceBook
from governor.domain.unavailable import unavailable
from governor.policy import parse_policy

NOW = dt.datetime(2026, 12, 6, 5, tzinfo=dt.UTC)
ROLE = "arn:aws:iam::123456789012:role/ml-engineer/ana"


class Rates:
    """A Cost Explorer stand-in: the amortised rate per type."""

    def __init__(self, **per_type: float) -> None:
        self.per_type = per_type

    def rate(self, instance_type: str, instance_id: str | None = None) -> EffectiveRate | None:
        found = self.per_type.get(instance_type)
        return None if found is None else EffectiveRate(found, "Cost Explorer amortised cost, 2026-11-06 to 2026-12-06")


def book(**per_type: float) -> PriceBook:
    return PriceBook(parse_policy({}).pricing, effective=Rates(**per_type) if per_type else None)


def test_an_owner_is_one_normalised_name_with_how_it_is_known() -> None:
    owner = facts.owner_of(ROLE, "creator")
    assert (owner.name, owner.proof, owner.principal) == ("ana", "creator", ROLE)
    assert facts.owner_of("", "owner tag") == facts.Owner()
    assert facts.Owner().text() == "unknown (no owner tag or recorded creator)"


def test_the_slack_user_is_found_by_address_or_by_the_name_an_address_stands_for() -> None:
    people = {"dara@demo.example": "UDARA"}
    assert facts.slack_user("dara@demo.example", people) == "UDARA"
    assert facts.slack_user("arn:aws:iam::123456789012:role/ml/dara", people) == "UDARA"
    assert facts.slack_user("bo", people) is None
    assert facts.owner_of("dara", people=people).mention() == "<@UDARA> (dara)"


def test_the_strongest_proof_wins_then_the_latest() -> None:
    seen = [("2026-12-06T02:00", "creator", ROLE), ("2026-12-06T01:00", "owner tag", "Bo@Demo.example")]
    assert facts.strongest(seen).name == "bo"
    later = [("2026-12-06T01:00", "creator", "old"), ("2026-12-06T03:00", "creator", ROLE)]
    assert facts.strongest(later).name == "ana"
    assert facts.strongest([("x", "owner tag", "unknown")]).known is False


def test_money_at_stake_has_one_unit_and_one_format() -> None:
    assert facts.per_day_text(1573.08) == "$1,573.08/day"
    assert facts.per_day_text(None) == ""
    assert facts.Price(usd_per_hour=2.0, basis="list", source="table").per_day(3) == 144.0


def test_the_price_follows_the_order_of_truth() -> None:
    spot = {"instance_id": "i-1", "instance_type": "g5.xlarge", "lifecycle": "spot", "price_per_hour": 0.5}
    on_demand = {**spot, "lifecycle": "on-demand", "price_per_hour": 1.006}
    # On-Demand: Cost Explorer's amortised rate for the type is what the account pays
    found = facts.price_of("i-1", "g5.xlarge", [on_demand], book(**{"g5.xlarge": 0.7}))
    assert (found.usd_per_hour, found.basis) == (0.7, "Cost Explorer amortised")
    # Spot: a type's average blends purchase options; the Spot price recorded with the session is its own
    found = facts.price_of("i-1", "g5.xlarge", [spot], book(**{"g5.xlarge": 0.7}))
    assert (found.usd_per_hour, found.basis, found.source) == (
        0.5,
        "session",
        "spot price recorded with the usage session",
    )
    # no session price: the table
    found = facts.price_of("i-1", "g5.xlarge", [{**on_demand, "price_per_hour": None}], book())
    assert (found.usd_per_hour, found.basis) == (1.006, "list")
    assert facts.price_of("i-1", "x9.huge", [], book()).basis == "unpriced"


def test_the_action_path_is_the_one_that_would_run() -> None:
    node = {"type": "terminate", "via": "kubernetes", "group": "gpu-demo", "node_owner": "karpenter"}
    assert facts.action_path(node).would() == (
        "would be cordoned and drained (PodDisruptionBudgets respected), then its Karpenter NodeClaim deleted "
        "(EKS cluster gpu-demo)"
    )
    group = {"type": "terminate", "via": "kubernetes", "group": "gpu-demo", "node_owner": "managed_node_group"}
    assert facts.action_path(group).kind == "node-group"
    asg = {"type": "terminate", "via": "autoscaling", "group": "train-asg"}
    assert facts.action_path(asg).would(enforced=True) == (
        "will be terminated through Auto Scaling group train-asg, desired capacity lowered by one"
    )
    warn = {"type": "warn", "planned": "stop"}
    assert facts.action_path(warn).would() == "would be stopped (EC2 StopInstances)"
    assert facts.action_path({"type": "notify"}).kind == "none"


def test_the_ledger_gives_each_resource_one_record() -> None:
    items = [
        {"kind": "launch", "instance_id": "i-1", "creator": ROLE, "at": "2026-12-06T02:00:00+00:00"},
        {
            "kind": "session",
            "instance_id": "i-1",
            "instance_type": "p5.48xlarge",
            "gpus": 8,
            "lifecycle": "on-demand",
            "owner": ROLE,
            "ownership_source": "creator",
            "team": "vision",
            "start": "2026-12-06T02:00:00+00:00",
            "end": None,
            "price_per_hour": 55.04,
        },
        {  # the idle sweep read the tags only: no owner tag, so "unknown"; never over the creator it does not see
            "kind": "decision",
            "policy": "idle",
            "resource": "i-1",
            "at": "2026-12-06T03:00:00+00:00",
            "evidence": {
                "status": "unmonitored",
                "owner": "unknown",
                "team": "vision",
                "instance_type": "p5.48xlarge",
                "metric_sources": {"judged_by": ["cloudwatch_agent"]},
                "purchase": {"kind": "on-demand"},
            },
            "actions": [],
        },
        {
            "kind": "decision",
            "policy": "idle",
            "resource": "cr-1",
            "at": "2026-12-06T03:00:00+00:00",
            "evidence": {
                "status": "unused-capacity",
                "instance_type": "p5.48xlarge",
                "unused_instances": 2,
                "price_per_hour": 32.77,
                "price_source": "Cost Explorer amortised cost, x",
                "owner": "platform",
                "team": "infra",
                "purchase": {"kind": "capacity-reservation"},
            },
            "actions": [{"type": "notify", "enforced": False, "owner": "platform"}],
        },
    ]
    found = facts.ledger_facts(items, book(), NOW, {"ana@demo.example": "UANA"})
    instance = found["i-1"]
    assert (instance.owner.name, instance.owner.proof, instance.owner.slack_user) == ("ana", "creator", "UANA")
    assert (instance.team, instance.purchase, instance.status, instance.gpus) == ("vision", "on-demand", "running", 8)
    assert instance.price.basis == "session" and instance.usd_per_day == round(55.04 * 24, 2)
    assert instance.metric_source == "cloudwatch_agent"
    reservation = found["cr-1"]
    assert reservation.usd_per_day == round(32.77 * 24 * 2, 2)
    assert (reservation.owner.name, reservation.status, reservation.price.basis) == (
        "platform",
        "active",
        "Cost Explorer amortised",
    )


def test_an_unavailable_source_is_said_in_words() -> None:
    class NoCredentialsError(Exception):
        pass

    class ClientError(Exception):
        def __init__(self, status: int, code: str) -> None:
            super().__init__("<!doctype html><title>500 Internal Server Error</title>")
            self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}

    assert unavailable(NoCredentialsError("Unable to locate credentials")) == "no AWS credentials"
    assert unavailable(ClientError(500, "500")) == "a server error (HTTP 500)"
    assert unavailable(ClientError(400, "AccessDeniedException")) == "access denied"
    assert unavailable(ClientError(400, "ValidationException")) == "refused (ValidationException)"
    assert unavailable(ValueError("boom")) == "failed (ValueError)"
