"""``governor explain --metrics`` and ``governor backtest --metrics`` on Container Insights performance log events
(EMF, with the agent's per-GPU dimension set), and the one-line errors of the node path. The decision itself is held
equal to the real sweep's in tests/adapters/test_kubernetes_explain.py."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from governor_cli.main import main

START = 1_793_577_600
DAY = dt.datetime.fromtimestamp(START, dt.UTC).strftime("%Y-%m-%d")
INSTANCE = "i-0123456789abcdef0"
NODE = "ip-10-0-1-5.ec2.internal"


def _events(minutes: int, busy_until: int = 0) -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    for minute in range(minutes):
        stamp = (START + 60 * minute) * 1000
        for device in ("nvidia0", "nvidia1"):
            events.append(
                {
                    "Type": "NodeGPU",
                    "Timestamp": str(stamp),
                    "ClusterName": "gpu-prod",
                    "GpuDevice": device,
                    "InstanceId": INSTANCE,
                    "InstanceType": "g5.12xlarge",
                    "NodeName": NODE,
                    "node_gpu_utilization": 90.0 if minute < busy_until and device == "nvidia1" else 0.0,
                    "node_gpu_memory_used": 2 * 1024**3,
                    "node_gpu_power_draw": 30.0,
                }
            )
        events.append(  # the node's rollup over its GPUs: never judged (the sweep reads per GPU)
            {"Type": "NodeGPU", "Timestamp": str(stamp), "ClusterName": "gpu-prod", "node_gpu_utilization": 50.0}
        )
        events.append(
            {
                "Type": "PodGPU",
                "Timestamp": str(stamp),
                "ClusterName": "gpu-prod",
                "Namespace": "testing",
                "PodName": "ollama",
                "FullPodName": "ollama-76f687f4cd-xcvvp",
                "GpuDevice": "nvidia0",
                "pod_gpu_utilization": 0.0,
            }
        )
    return events


def _write(tmp_path: Path, events: list[dict[str, object]]) -> Path:
    path = tmp_path / "performance.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return path


def test_backtest_replays_container_insights_events_per_gpu_with_namespaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _events(5 * 60, busy_until=60))
    assert main(["backtest", "--metrics", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    actions = data["instances"][INSTANCE]["actions"]
    assert [a["type"] for a in actions][:2] == ["warn", "stop"]
    assert actions[0]["at"] >= f"{DAY}T02:30:00Z"  # nvidia1 worked the first hour; warned 90 min after
    assert actions[1]["at"] >= f"{DAY}T03:00:00Z"  # and stopped once the whole 120-min window is idle
    rows = {r["namespace"]: r for r in data["namespaces"]}
    assert rows["testing"]["allocated_but_idle"] and rows["testing"]["gpu_hours"] == pytest.approx(5, abs=0.05)
    assert rows[None]["gpu_hours"] == pytest.approx(5, abs=0.05)  # nvidia1: no pod held it


def test_explain_says_which_gpu_keeps_the_node_and_what_it_assumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _events(3 * 60, busy_until=150))
    assert main(["explain", "--metrics", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"event {INSTANCE} ({NODE}) (idle sweep at {DAY}T03:00:00+00:00, metrics from Container")
    assert "GPU nvidia1: GPU utilisation reached 90.0%" in out and ": OK" in out.splitlines()[0]
    assert "assumed: no idle mark yet" in out and "assumed: an On-Demand" in out
    assert main(["explain", "--metrics", str(path), "--node", NODE, "--at", f"{DAY}T03:00:00Z", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["status"] == "busy"
    assert main(["explain", "--metrics", str(path), "--at", f"{DAY}T05:00:00Z", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)  # two hours after the export ends: no data, never idle
    assert result["status"] == "unmonitored" and result["verdict"] == "ok"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node", "ip-10-9-9-9"], "no node 'ip-10-9-9-9' in the export (it has i-0123456789abcdef0 (ip-10-0-1-5"),
        (["--at", "yesterday"], "--at 'yesterday': not ISO 8601"),
    ],
)
def test_node_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = _write(tmp_path, _events(30))
    assert main(["explain", "--metrics", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_explain_without_an_event_or_metrics_and_node_without_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["explain"]) == 2
    assert "explain needs an event file" in capsys.readouterr().err
    assert main(["explain", "-", "--node", NODE]) == 2
    assert "--node goes with --metrics" in capsys.readouterr().err
    path = tmp_path / "cpu.jsonl"
    path.write_text(json.dumps({"Type": "Node", "node_cpu_utilization": 3.0}) + "\n")
    assert main(["explain", "--metrics", str(path)]) == 2
    assert "not a Prometheus range-query answer" in capsys.readouterr().err  # JSON of neither kind
