"""Agent metrics as AWS publishes them, required signals by policy, fresh data only, and who owns the capacity."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from governor.domain.fleet import Instance
from governor.idle.assessment import assess
from governor.idle.decide import decide
from governor.idle.domain import GPU_MEMORY_USED, GPU_UTILIZATION, Mark, Series, required_signals, sweep_interval
from governor.idle.purchase import reclaim_action
from governor.policy import Policy, PolicyError, parse_policy

NOW = dt.datetime(2026, 11, 2, 12, 0, tzinfo=dt.UTC)


def policy(**idle: Any) -> Policy:
    return parse_policy({"idle": {"enforce": True, **idle}})


def instance(**tags: str) -> Instance:
    return Instance(
        id="i-0a", type="g5.xlarge", state="running", launch_time=NOW - dt.timedelta(hours=6), tags=dict(tags)
    )


def minutes(values: list[float], end: dt.datetime = NOW) -> Series:
    first = end.timestamp() - 60 * len(values)
    return Series([first + 60 * i for i in range(len(values))], values)


def test_memory_is_read_in_mb_as_the_cloudwatch_agent_publishes_it() -> None:
    """nvidia_smi_memory_used is MB (nvidia-smi's MiB): a 2 GB <-> 40 GB swing is activity, not 0.0 MiB."""
    swing = [2_048.0, 40_960.0] * 60
    data = {GPU_UTILIZATION: minutes([0.5] * 120), GPU_MEMORY_USED: minutes(swing)}
    result = assess(instance(), data, policy(), NOW)
    assert result.status == "busy" and "38912 MiB" in result.reasons[0]
    assert result.evidence["max_gpu_memory_used_mib"] == 40_960.0


def test_utilisation_only_agents_are_judged_when_memory_is_not_required() -> None:
    util_only = {GPU_UTILIZATION: minutes([0.5] * 120)}
    assert assess(instance(), util_only, policy(), NOW).status == "unmonitored"  # memory required by default
    relaxed = policy(memory_change_tolerance_mib=None)
    assert required_signals(relaxed.idle) == (GPU_UTILIZATION,)
    result = assess(instance(), util_only, relaxed, NOW)
    assert result.status == "idle" and "memory" not in result.reasons[0]


def test_required_signals_follow_the_policy() -> None:
    p = policy(cpu_utilization_threshold=10, network_bytes_threshold=1e6)
    assert required_signals(p.idle) == (GPU_UTILIZATION, GPU_MEMORY_USED, "cpu_utilization", "network_bytes")


def test_the_newest_sample_must_be_recent_else_unmonitored() -> None:
    """Idle for two hours, but the last 8 minutes have not arrived (newest sample 9 min old): a job may have started, so never idle."""
    end = NOW - dt.timedelta(minutes=8)
    data = {GPU_UTILIZATION: minutes([0.5] * 120, end), GPU_MEMORY_USED: minutes([9_000.0] * 120, end)}
    stale = assess(instance(), data, policy(min_samples_fraction=0.5), NOW)
    assert stale.status == "unmonitored" and "9.0 min old" in stale.reasons[-1]  # the last sample is the minute before
    assert stale.evidence["newest_sample_age_minutes"] == 9.0
    assert assess(instance(), data, policy(min_samples_fraction=0.5, max_sample_age_minutes=10), NOW).status == "idle"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_sample_age_minutes", 0),
        ("max_sample_age_minutes", 61),
        ("breaker_fleet_percent", 0),
        ("breaker_fleet_percent", 101),
        ("breaker_min_instances", 1),
        ("memory_change_tolerance_mib", -1),
        ("gpu_memory_unit", "GB"),
        ("asg_action", "stop"),
        ("breaker_onset_minutes", 0),
        ("breaker_hold_minutes", 5),
        ("breaker_min_teams", 1),
        ("idle_power_margin_percent", 150),
        ("stall_utilization_threshold", 0),
        ("metric_source", "prometheus-by-tag"),
        ("gpu_power", {"NVIDIA L4": {"idle_watts": 80, "limit_watts": 72}}),
        ("gpu_power", {"NVIDIA L4": {"idle_watts": -1, "limit_watts": 72}}),
    ],
)
def test_new_policy_fields_have_documented_ranges(field: str, value: Any) -> None:
    with pytest.raises(PolicyError) as error:
        parse_policy({"idle": {field: value}})
    assert field in str(error.value)


@pytest.mark.parametrize(
    ("schedule", "minutes_"),
    [("rate(15 minutes)", 15), ("rate(1 hour)", 60), ("rate(5 minutes)", 5), ("cron(0/15 * * * ? *)", 15)],
)
def test_the_sweep_interval_comes_from_the_schedule(schedule: str, minutes_: int) -> None:
    assert sweep_interval(policy(schedule=schedule).idle) == dt.timedelta(minutes=minutes_)


def _due(inst: Instance, p: Policy) -> Any:
    data = {GPU_UTILIZATION: minutes([0.5] * 120), GPU_MEMORY_USED: minutes([9_000.0] * 120)}
    mark = Mark(idle_since=NOW - dt.timedelta(minutes=30), warned_at=NOW - dt.timedelta(minutes=30))
    return decide(inst, assess(inst, data, p, NOW), mark, p, NOW)


def test_an_auto_scaling_member_is_reclaimed_through_its_group() -> None:
    member = instance(**{"aws:autoscaling:groupName": "train-pool"})
    assert reclaim_action(member, policy().idle) == "terminate"  # a stopped member would be replaced
    outcome = _due(member, policy())
    assert outcome.outcome == "acted"
    action = outcome.decision.enforced_actions()[0].model_dump()
    assert action["type"] == "terminate" and action["via"] == "autoscaling"
    assert action["group"] == "train-pool" and action["decrement_desired"] is True


def test_an_auto_scaling_member_is_reported_only_when_the_policy_says_so() -> None:
    member = instance(**{"aws:autoscaling:groupName": "train-pool"})
    outcome = _due(member, policy(asg_action="report"))
    assert outcome.outcome == "reported" and outcome.finding and "train-pool" in outcome.finding
    assert not any(a.type in ("stop", "terminate") for a in outcome.decision.actions)
    assert outcome.mark is not None and outcome.mark.reported_at == NOW  # reported once, not every sweep


@pytest.mark.parametrize(
    ("tags", "group"),
    [
        ({"eks:cluster-name": "ml", "eks:nodegroup-name": "gpu", "aws:autoscaling:groupName": "eks-gpu-1"}, "gpu"),
        ({"eks:cluster-name": "ml", "aws:autoscaling:groupName": "eks-gpu-1234"}, "eks-gpu-1234"),
        ({"kubernetes.io/cluster/ml": "owned", "aws:autoscaling:groupName": "nodes"}, "nodes"),
        ({"karpenter.sh/nodepool": "gpu", "aws:ec2:fleet-id": "fleet-1"}, "gpu"),
        ({"karpenter.sh/provisioner-name": "default", "aws:ec2:fleet-id": "fleet-2"}, "default"),
    ],
)
def test_kubernetes_nodes_are_reported_only_with_their_node_group_named(tags: dict[str, str], group: str) -> None:
    outcome = _due(instance(**tags), policy())
    assert outcome.outcome == "reported"
    assert not any(a.type in ("stop", "terminate", "checkpoint") for a in outcome.decision.actions)
    assert any("Kubernetes node" in r and f"node group {group}" in r for r in outcome.decision.reasons)


@pytest.mark.parametrize(
    "tags",
    [
        {"eks:cluster-name": "ml"},
        {"eks:nodegroup-name": "gpu"},
        {"kubernetes.io/cluster/ml": "owned"},
        {"karpenter.sh/nodepool": "gpu"},
        {"karpenter.sh/provisioner-name": "default"},
    ],
)
def test_a_kubernetes_tag_alone_spares_nothing(tags: dict[str, str]) -> None:
    """Issue 33: anyone can set these tags; without an Auto Scaling group or EC2 Fleet behind it, no claim holds."""
    outcome = _due(instance(**tags), policy())
    assert outcome.outcome == "acted"


def test_every_metric_source_the_policy_accepts_has_an_implementation() -> None:
    from typing import get_args

    from governor.idle.policy import IdlePolicy
    from governor.idle.sources import SOURCES, metric_source

    names = get_args(IdlePolicy.model_fields["metric_source"].annotation)
    assert set(names) == set(SOURCES)
    with pytest.raises(ValueError, match="metric_source"):
        metric_source("nonsense", "us-east-1")
