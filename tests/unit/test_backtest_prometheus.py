"""``governor backtest --metrics`` on Prometheus exports of the DCGM exporter's series: a range query's JSON answer
and text exposition with timestamps, both made from the exporter's own captured H100 MIG node
(tests/fixtures/dcgm_exporter); judged per GPU and MIG slice, with GPU-hours by namespace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from governor.idle.kubernetes.promql import DCGM_FIELDS, gpu_query
from governor_cli.main import main
from governor_cli.testing.dcgm import PrometheusServer, captured, exposition, load_capture

START = 1_793_577_600  # 2026-11-01T00:00:00Z
INSTANCE = "i-0123456789abcdef0"
NODE = "ip-10-0-1-5.ec2.internal"
HOURS = 5


def _values(capture, minute: int, busy_until: int) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    util = {d.key: (80.0 if minute < busy_until and d.key == "3" else 0.0) for d in capture.devices}
    return {"DCGM_FI_DEV_FB_USED": captured(capture, "DCGM_FI_DEV_FB_USED"), "DCGM_FI_DEV_GPU_UTIL": util}


def _run(capsys: pytest.CaptureFixture[str], path: Path) -> dict:  # type: ignore[type-arg]
    code = main(["backtest", "--metrics", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def server() -> PrometheusServer:
    capture = load_capture()
    server = PrometheusServer()
    for minute in range(HOURS * 60):
        at = START + 60 * minute
        server.scrape(at, exposition(capture, NODE, _values(capture, minute, busy_until=60)))
        server.add(at, "kube_node_info", {"node": NODE, "provider_id": f"aws:///us-east-1a/{INSTANCE}"}, 1)
    return server


def test_a_range_query_export_is_replayed_per_gpu_with_gpu_hours_by_namespace(
    server: PrometheusServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    times = [START + 60 * m for m in range(HOURS * 60)]
    export = {}
    for signal, (field, _) in DCGM_FIELDS.items():
        result = server.evaluate(gpu_query(signal, "hostname"), times)
        if result:
            export[field] = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    export["kube_node_info"] = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": server.evaluate("max by (node, provider_id) (kube_node_info{})", times),
        },
    }
    path = tmp_path / "amp-export.json"
    path.write_text(json.dumps(export))
    data = _run(capsys, path)
    actions = [a["type"] for a in data["instances"][INSTANCE]["actions"]]
    assert actions[:2] == ["warn", "stop"]  # GPU 3 worked the first hour; idle after, every GPU and slice
    first_warning = data["instances"][INSTANCE]["actions"][0]["at"]
    assert first_warning >= "2026-11-01T02:45:00Z"  # not before GPU 3 was idle for the whole 2-hour window
    rows = {r["namespace"]: r for r in data["namespaces"]}
    assert rows["testing"]["allocated_but_idle"] and rows["testing"]["gpu_hours"] == pytest.approx(2 * HOURS, abs=0.1)
    assert rows[None]["gpu_hours"] == pytest.approx(7 * HOURS, abs=0.2)


def test_text_exposition_with_timestamps_is_replayed_by_node_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = load_capture()
    lines = []
    for minute in range(HOURS * 60):
        text = exposition(capture, NODE, _values(capture, minute, busy_until=0), label="Hostname")
        stamp = (START + 60 * minute) * 1000
        lines += [f"{line} {stamp}" for line in text.splitlines() if line and not line.startswith("#")]
    path = tmp_path / "federate.prom"
    path.write_text("\n".join(lines) + "\n")
    data = _run(capsys, path)
    assert [a["type"] for a in data["instances"][NODE]["actions"]][:2] == ["warn", "stop"]
    assert {r["namespace"] for r in data["namespaces"]} == {"testing", None}


def test_an_export_without_timestamps_is_refused_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scrape.prom"
    capture = load_capture()
    path.write_text(exposition(capture, NODE, _values(capture, 0, busy_until=0)))
    assert main(["backtest", "--metrics", str(path)]) == 2
    err = capsys.readouterr().err
    assert "has no timestamp" in err and len(err.strip().splitlines()) == 1
