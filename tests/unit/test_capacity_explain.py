"""``governor explain`` on AWS's capacity samples: the handler's decision on the instance it assumes."""

from __future__ import annotations

import json
from typing import Any

from governor.explain import explain
from governor.policy import parse_policy
from governor_cli.testing.capacity import delivered


def test_explain_shows_the_time_left_of_each_capacity_notice() -> None:
    policy = parse_policy({})
    reservation = delivered(
        "capacity-reservation-interruption-warning.json",
        {"[instance-id]": "i-0abc12345678", "[Current time in yyyy-mm-ddThh:mm:ssZ]": "2026-12-01T10:15:00Z"},
        {"instance-termination-time": "2026-12-01T10:17:00Z"},
    )
    block = delivered(
        "capacity-block-expiration-warning.json",
        {"[ODCR ID]": "cr-0a1b2c3d4e5f60718", "[Current time]": "2026-12-01T10:15:00Z",
         "[ODCR End Date]": "2026-12-01T10:55:00Z"},
    )  # fmt: skip
    for event, rule, seconds in ((reservation, "capacity-reservation-interruption", 120),
                                 (block, "capacity-block-expiry", 600)):  # fmt: skip
        (decision,) = [d for d in explain(event, policy)["decisions"] if d["policy"] == "spot"]
        assert decision["verdict"] == "act", decision
        assert f"({seconds}s after the event)" in decision["reasons"][0], rule
        assert decision["actions"][0]["type"] == "checkpoint" and not decision["actions"][0]["enforced"]


def test_explain_instances_from_describe_output(tmp_path: Any, capsys: Any) -> None:
    """``governor explain --instances``: the sweep's decision for a Capacity Block instance read from the AWS CLI's
    own outputs (DescribeInstances, DescribeCapacityReservations), report-only with the block's end; a bad file is one
    line and exit 2."""
    import json

    from governor_cli.main import main

    instances = tmp_path / "instances.json"
    instances.write_text(
        json.dumps(
            {
                "Reservations": [
                    {
                        "Instances": [
                            {
                                "InstanceId": "i-0abc12345678",
                                "InstanceType": "p5.48xlarge",
                                "State": {"Name": "running"},
                                "LaunchTime": "2026-11-01T00:00:00Z",
                                "InstanceLifecycle": "capacity-block",
                                "CapacityReservationId": "cr-0a1b2c3d4e5f60718",
                                "Tags": [{"Key": "owner", "Value": "ana@example.com"}],
                            }
                        ]
                    }
                ]
            }
        )
    )
    reservations = tmp_path / "reservations.json"
    reservations.write_text(
        json.dumps(
            {
                "CapacityReservations": [
                    {
                        "CapacityReservationId": "cr-0a1b2c3d4e5f60718",
                        "InstanceType": "p5.48xlarge",
                        "State": "active",
                        "ReservationType": "capacity-block",
                        "InstanceMatchCriteria": "targeted",
                        "TotalInstanceCount": 1,
                        "AvailableInstanceCount": 0,
                        "EndDate": "2099-01-01T11:30:00Z",
                    }
                ]
            }
        )
    )
    assert main(["explain", "--instances", str(instances), "--reservations", str(reservations)]) == 0
    out = capsys.readouterr().out
    assert "[idle] would act i-0abc12345678" in out
    assert "runs in Capacity Block cr-0a1b2c3d4e5f60718 (prepaid, ends 2099-01-01 11:30 UTC)" in out
    assert "assumed: every GPU signal of i-0abc12345678 idle for the whole window" in out
    (tmp_path / "bad.json").write_text("{}")
    assert main(["explain", "--instances", str(tmp_path / "bad.json")]) == 2
    assert "not a DescribeInstances response" in capsys.readouterr().err


BLOCK = "cr-0a1b2c3d4e5f60718"


def block_delivered(end: str = "2026-12-03T11:30:00Z") -> dict[str, Any]:
    return delivered(
        "capacity-block-delivered.json",
        {"[ODCR ID]": BLOCK, "[Current time]": "2026-12-01T11:30:00Z", "[ODCR End Date]": end},
    )


def test_explain_acts_on_a_capacity_block_delivered_sample(tmp_path: Any, capsys: Any) -> None:
    """Issue 49.3: the delivery is recorded on the block's instances and their owners are told when it ends; what
    the handler would read from AWS (the block, its instances) is listed under the assumptions."""
    from governor_cli.main import main

    result = explain(block_delivered(), parse_policy({}))
    spot = [d for d in result["decisions"] if d["policy"] == "spot"]
    assert len(spot) == 1, "explain has no decision for a delivered Capacity Block"
    (decision,) = spot
    assert result["verdict"] == decision["verdict"] == "act"
    assert [a["type"] for a in decision["actions"]] == ["record", "notify"]
    assert decision["actions"][1]["owner"] == "(owner tag)"
    assert "until 2026-12-03 11:30 UTC" in decision["reasons"][0] and "from 11:00 UTC" in decision["reasons"][0]
    assert any("DescribeCapacityReservations" in a for a in decision["assumptions"])
    path = tmp_path / "delivered.json"
    path.write_text(json.dumps(block_delivered()))
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ACT" in out and "assumed: EC2 reports cr-0a1b2c3d4e5f60718 as an active Capacity Block" in out


def test_explain_refuses_an_expiry_sent_hours_before_its_end_as_the_handler_would() -> None:
    block = delivered(
        "capacity-block-expiration-warning.json",
        {"[ODCR ID]": BLOCK, "[Current time]": "2026-12-01T10:15:00Z", "[ODCR End Date]": "2026-12-01T20:55:00Z"},
    )
    (decision,) = [d for d in explain(block, parse_policy({}))["decisions"] if d["policy"] == "spot"]
    assert decision["verdict"] == "ignored" and "expiration warning refused" in decision["reasons"][0].lower()
    assert "640 minutes from now" in decision["reasons"][0]


def test_the_handler_records_what_explain_shows_for_a_delivered_block() -> None:
    """Run on fakes holding exactly the block and the instance explain assumes, the handler records the decision
    explain prints (everything but the assumptions)."""
    import datetime as dt

    from governor.domain.capacity import Reservation
    from governor.domain.fleet import Instance
    from governor.runtime import Runtime
    from governor.spot import explain as spot_explain
    from governor.spot.handler import Adapters, handle
    from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink

    policy = parse_policy({})
    at = dt.datetime(2026, 12, 1, 11, 30, tzinfo=dt.UTC)
    block = spot_explain.assumed_block(BLOCK, dt.datetime(2026, 12, 3, 11, 30, tzinfo=dt.UTC), policy).state
    member = spot_explain.assumed_instance(f"(an instance in {BLOCK})", policy, at, "capacity-block", BLOCK).state

    class EC2:
        def instance(self, instance_id: str) -> Instance | None:
            return None

        def in_reservation(self, reservation_id: str) -> list[Instance]:
            return [member] if reservation_id == BLOCK else []

        def reservations(self, ids: list[str]) -> dict[str, Reservation]:
            return {BLOCK: block} if BLOCK in ids else {}

        def active(self) -> list[Reservation]:
            return [block]

    ledger = MemoryLedger()
    runtime = Runtime(policy, ledger, MemorySink(), MemoryDeadLetters())
    ec2 = EC2()
    handle(block_delivered(), runtime, Adapters(ec2, None, None, reservations=ec2), now=at)  # type: ignore[arg-type]
    (shown,) = [d for d in explain(block_delivered(), policy)["decisions"] if d["policy"] == "spot"]
    (_, recorded), *_ = ledger.decisions
    public = recorded.public()
    public.pop("assumptions")
    shown.pop("assumptions")
    assert public == shown
