"""Issue 33's least-privilege findings on the synthesized template: each grant held to the fleet, or written down.

moto evaluates no IAM, so these prove on the template (``tests/infra/policy_eval.py`` evaluates the role policies the
way IAM does for one account) what a function's role can no longer do: the Spot role drained any target group, the
idle role terminated members of any Auto Scaling group, the keys role invoked every function and could rotate the
governor's own Slack secrets.
"""

from __future__ import annotations

from typing import Any

from tests.infra.conftest import Synth
from tests.infra.policy_eval import RolePolicy, role_policy

TARGET_GROUP = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/website/0123456789abcdef"


def _role_of(synth: Synth, capability: str) -> RolePolicy:
    (function,) = [
        f
        for f in synth.resources("AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == f"governor.{capability}.handler.lambda_handler"
    ]
    return role_policy(synth.json, function["Properties"]["Role"]["Fn::GetAtt"][0])


def test_spot_deregisters_only_from_target_groups_carrying_the_fleet_tags(synth: Synth) -> None:
    role = _role_of(synth, "spot")
    fleet: dict[str, Any] = {"aws:ResourceTag/gpu-fleet": "true"}
    assert role.allows("elasticloadbalancing:DeregisterTargets", TARGET_GROUP, **fleet)
    assert not role.allows("elasticloadbalancing:DeregisterTargets", TARGET_GROUP)
    assert not role.allows("elasticloadbalancing:DeregisterTargets", TARGET_GROUP, **{"aws:ResourceTag/gpu-fleet": "x"})
