"""``governor explain`` on AWS's capacity samples: the handler's decision on the instance it assumes."""

from __future__ import annotations

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
