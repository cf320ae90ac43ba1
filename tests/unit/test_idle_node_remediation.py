"""Issue 48: the EKS node is told one story. The report's fix for an idle node is the path that would really run
(cordon, drain, its NodeClaim or node group), never "Stop the instance"; a node without GPU data is sent to its
cluster's DCGM / Prometheus source, never to the CloudWatch agent it does not use."""

from __future__ import annotations

from typing import Any

from governor.idle.findings import problems
from governor.policy import parse_policy

POLICY = parse_policy({})


def _warned(**action: Any) -> dict[str, Any]:
    return {
        "policy": "idle",
        "verdict": "act",
        "rule": "idle.warned",
        "severity": "warning",
        "reasons": ["idle for 120 min"],
        "evidence": {"status": "warned", "metric_sources": {"judged_by": ["cluster gpu-demo"]}},
        "actions": [{"type": "warn", "planned": "terminate", **action}],
    }


def test_an_idle_eks_node_is_told_the_drain_that_would_run() -> None:
    (problem,) = problems(_warned(via="kubernetes", group="gpu-demo"), POLICY)
    assert "cordoned and drained" in problem.remediation and "gpu-demo" in problem.remediation
    assert "Stop the instance" not in problem.remediation


def test_an_eks_node_without_gpu_data_is_sent_to_its_clusters_source() -> None:
    decision = {**_warned(), "verdict": "ok", "rule": "idle.unmonitored", "actions": []}
    decision["evidence"] = {**decision["evidence"], "status": "unmonitored"}
    (problem,) = problems(decision, POLICY)
    assert "DCGM exporter" in problem.remediation and "gpu-demo" in problem.remediation
    assert "agent on the instance" not in problem.remediation


def test_a_plain_instance_keeps_the_instance_fix() -> None:
    decision = _warned()
    decision["evidence"] = {"status": "warned", "metric_sources": {"judged_by": ["cloudwatch_agent"]}}
    (problem,) = problems(decision, POLICY)
    assert problem.remediation.startswith("Stop the instance")
