"""``governor explain`` on AWS's capacity samples: the handler's decision on the instance it assumes."""

from __future__ import annotations

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
