"""Today's GPU instances through the real paths (issue 49 item 4, issue 48 items 5 and 7): ``governor explain`` of a
launch of a B200, GB200 or fractional-L4 instance treats it as a GPU instance and names its GPUs; a fractional GPU's
session counts its share of GPU-hours; the idle energy covers every GPU model of the demo, says what it leaves out
and why, and names its PUE and grid factors with their sources in HTML, text, Slack and JSON."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from governor.domain.costs import gpu_hours_and_cost
from governor.report.build import team_view
from governor.report.render.html_page import render_html
from governor.report.render.slack import render_text, slack_messages
from governor_cli.main import main
from tests.unit.test_lifecycle_handler import GPU_ID, gpu, make_world, state_event
from tests.unit.test_report import _idle, _session, at
from tests.unit.test_report_views import report_over

ROOT = Path(__file__).resolve().parents[2]
RUN_INSTANCES = ROOT / "tests/fixtures/events/custodian-event-cloud-trail-run-instances.json"


@pytest.mark.parametrize(
    ("instance_type", "gpus"),
    [
        ("p6-b200.48xlarge", "8 x NVIDIA B200"),
        ("p6e-gb200.36xlarge", "4 x NVIDIA GB200"),
        ("g6f.xlarge", "1/8 of an NVIDIA L4"),
    ],
)
def test_explain_of_a_launch_of_todays_gpu_types_treats_it_as_a_gpu_instance_and_names_its_gpus(
    instance_type: str, gpus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    event = tmp_path / "run.json"
    event.write_text(RUN_INSTANCES.read_text().replace("t2.micro", instance_type))
    main(["explain", str(event)])
    out = capsys.readouterr().out
    assert "[lifecycle] act" in out and "not in the GPU families" not in out
    assert f"{instance_type} ({gpus}" in out
    assert f"GPU instance i-784cdacd ({instance_type})" in out  # the network check judges it as a GPU instance


def test_a_fractional_gpu_counts_its_share_of_gpu_hours_and_an_unpriced_b200_its_eight() -> None:
    world = make_world()
    world.ec2.by_id[GPU_ID] = gpu(type="g6f.large", tags={"team": "vision", "owner": "ana"})
    world.send(state_event("running", "2026-12-01T08:00:00Z"))
    world.ec2.by_id[GPU_ID] = gpu(type="g6f.large", state="stopped", tags={"team": "vision", "owner": "ana"})
    world.send(state_event("stopped", "2026-12-01T16:00:00Z"))
    [session] = world.sessions()
    assert session["gpus"] == 0.125  # an eighth of an L4 (GpuPartitionSize), not "1 GPU assumed"
    day = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    [row] = gpu_hours_and_cost(world.sessions(), day, day + dt.timedelta(days=1))
    assert (row.instance_hours, row.gpu_hours) == (8.0, 1.0)

    other = make_world()
    other.ec2.by_id[GPU_ID] = gpu(type="p6-b200.48xlarge", tags={"team": "vision", "owner": "ana"})
    other.send(state_event("running", "2026-12-01T08:00:00Z"))
    [b200] = other.sessions()
    assert b200["gpus"] == 8


def _idle_on(instance: str, instance_type: str, gpus: float, team: str = "vision") -> list[dict[str, Any]]:
    return [
        _session(instance, instance_type, gpus, 1.0, team, "ana", start=at(0), end=at(9), region="us-east-1"),
        _idle(instance, at(3), "warned", 0.0),
        _idle(instance, at(8), "acted", 0.0),
    ]


#: Every GPU instance type the demo and the simulated fleet run (cli/governor_cli/demo, cli/governor_cli/sim).
DEMO_GPU_TYPES = {
    "g4dn.xlarge": 1,
    "g5.xlarge": 1,
    "g6.xlarge": 1,
    "g6e.xlarge": 1,
    "p3.2xlarge": 1,
    "p4d.24xlarge": 8,
    "p5.48xlarge": 8,
}


def test_idle_energy_covers_every_gpu_model_of_the_demo_and_says_so_on_the_tile() -> None:
    items = [
        item
        for n, (instance_type, gpus) in enumerate(DEMO_GPU_TYPES.items())
        for item in _idle_on(f"i-0{n}", instance_type, gpus)
    ]
    report = report_over(items)
    cost = report.cost
    assert cost.idle_energy_unknown_gpu_hours == 0.0 and cost.idle_energy_left_out == {}
    models = {row["gpu_model"] for row in cost.energy.rows}
    assert {"NVIDIA H100 80GB HBM3", "NVIDIA L4", "NVIDIA L40S", "NVIDIA A10G", "Tesla T4"} <= models
    assert all(row["idle_watts"] and row["busy_watts"] for row in cost.energy.rows)
    tile = render_html(report).split("idle GPU energy", 1)[1][:300]
    assert "covers 100% of idle GPU-h" in tile
    assert "covers 100% of idle GPU-h" in render_text(report) and "covers 100%" in str(slack_messages(report))


def test_newer_gpus_have_cited_draws_and_what_is_left_out_is_named_with_why() -> None:
    items = [
        *_idle_on("i-h200", "p5en.48xlarge", 8),
        *_idle_on("i-b200", "p6-b200.48xlarge", 8),
        *_idle_on("i-trn2", "trn2.48xlarge", 16, team="nlp"),
    ]
    report = report_over(items)
    cost = report.cost
    rows = {row["gpu_model"]: row for row in cost.energy.rows}
    assert rows["NVIDIA H200"]["idle_watts"] and rows["NVIDIA B200"]["idle_watts"]
    assert rows["AWS Trainium2"]["idle_kwh"] is None
    left = cost.idle_energy_unknown_gpu_hours
    assert left == pytest.approx(16 * 4, abs=0.5)  # 16 Trainium2 chips, four idle hours
    said = f"of {cost.idle_energy_gpu_hours:,.1f} idle GPU-h: no draw known for AWS Trainium2 (AWS publishes no"
    assert said in render_html(report) and said in render_text(report) and said in str(slack_messages(report))
    assert json.loads(report.model_dump_json())["cost"]["idle_energy_left_out"] == {
        "AWS Trainium2": "AWS publishes no per-chip power for Trainium2"
    }
    nlp = team_view(report, "nlp")
    assert nlp.cost.idle_energy_unknown_gpu_hours == pytest.approx(left) and "AWS Trainium2" in render_text(nlp)
    assert "covers 100% of idle GPU-h" in render_text(team_view(report, "vision"))


def test_the_pue_and_grid_factors_are_named_with_their_sources_in_html_text_slack_and_json() -> None:
    report = report_over(_idle_on("i-p5", "p5.48xlarge", 8))
    named = "PUE 1.135 (Cloud Carbon Footprint, AWS average"
    for rendering in (render_html(report), render_text(report), str(slack_messages(report))):
        assert named in rendering and "grid factors per region (Cloud Carbon Footprint" in rendering
    assert named in json.loads(report.model_dump_json())["cost"]["energy_basis"]


def test_the_operators_own_idle_draw_for_a_model_reaches_every_type_carrying_it() -> None:
    """``idle.gpu_power`` is keyed by model: a fractional L4 and a B200 box find theirs through the type's GPU facts
    (main's family map stopped at p5en, so their power was never judged)."""
    from governor.idle.assessment import power_limit
    from governor.policy import parse_policy

    idle = parse_policy(
        {
            "idle": {
                "gpu_power": {
                    "NVIDIA L4": {"idle_watts": 16, "limit_watts": 72},
                    "NVIDIA B200": {"idle_watts": 140, "limit_watts": 1000},
                }
            }
        }
    ).idle
    for instance_type, model in (("g6f.xlarge", "NVIDIA L4"), ("p6-b200.48xlarge", "NVIDIA B200")):
        limit = power_limit(instance_type, idle)
        assert limit.model == model and limit.ceiling is not None and "policy idle.gpu_power" in limit.note
