"""A shortened demo, end to end on the local emulator: what was warned, stopped, revoked, notified and reported."""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path

import pytest

from governor.cli import main
from governor.demo.run import DemoOptions, DemoResult, run_demo
from governor.policy import load_policy
from tests.conftest import ROOT

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def enforced(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    out = tmp_path_factory.mktemp("demo-out")
    options = DemoOptions(policy=load_policy(ROOT / "governor.yaml"), out=out, enforce=True, instances=12, hours=4.5)
    return run_demo(options)


def _decisions(result: DemoResult, policy: str) -> list[dict]:
    return [d for d in result.decisions if d.get("kind") == "decision" and d.get("policy") == policy]


def test_only_truly_idle_instances_are_warned_then_stopped(enforced: DemoResult) -> None:
    assert enforced.stopped, "the idle policy stopped nothing"
    # idle boxes, abandoned notebooks and training jobs that finished; never a server or a box it cannot see
    assert {enforced.kinds[i] for i in enforced.stopped} <= {"idle", "notebook", "training"}
    warned = {d["resource"] for d in _decisions(enforced, "idle") if any(a["type"] == "warn" for a in d["actions"])}
    assert set(enforced.stopped) <= warned, "an instance was stopped without a warning first"
    working = {i for i, kind in enforced.kinds.items() if kind in ("inference", "unmonitored")}
    assert not working & set(enforced.stopped)
    acted = {
        d["resource"]: d["evidence"]["window_end"] for d in _decisions(enforced, "idle") if d["rule"] == "idle.acted"
    }
    for instance_id in enforced.stopped:  # ground truth: nothing was working when it was stopped
        stopped_at = dt.datetime.fromisoformat(acted[instance_id]).timestamp()
        assert not enforced.truth[instance_id].working_at(stopped_at), (instance_id, enforced.kinds[instance_id])


def test_world_open_ssh_and_training_port_to_cidr_are_revoked(enforced: DemoResult) -> None:
    assert enforced.open_ingress == []
    revoked = [a for d in _decisions(enforced, "network") for a in d["actions"] if a["type"] == "revoke_ingress"]
    assert any(a.get("enforced") for a in revoked)


def test_keys_are_rotated_and_the_old_access_key_deactivated(enforced: DemoResult) -> None:
    assert enforced.rotation_enabled
    assert enforced.deactivated_keys == 1


def test_spot_warning_sent_a_checkpoint_and_findings_reached_the_notifier(enforced: DemoResult) -> None:
    checkpoints = [a for d in _decisions(enforced, "spot") for a in d["actions"] if a["type"] == "checkpoint"]
    assert checkpoints and all(a["enforced"] for a in checkpoints)
    policies = {f.get("policy") for f in enforced.notified}
    assert {"idle", "network", "keys", "spot"} <= policies


def test_report_counts_the_incidents_and_the_savings(enforced: DemoResult) -> None:
    security = {q["name"]: q["count"] for q in enforced.report["security"]}
    assert security["world_open_ingress"] == 1
    assert security["gpu_instance_launches"] == 12
    assert enforced.report["cost"]["idle_gpu_hours_reclaimed"] > 0
    assert enforced.report["cost"]["savings_usd"] > 0
    html = (enforced.out / "report.html").read_text()
    assert "world_open_ingress" in html
    assert list(Path(enforced.out / "cloudtrail").rglob("*.json.gz"))


def test_a_taken_port_exits_2_with_a_message(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["demo", "--skip-synth", "--port", str(port), "--out", str(tmp_path)])
    assert code == 2
    assert f"port {port}" in capsys.readouterr().err
