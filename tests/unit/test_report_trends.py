""" "Is it getting better?" (issue 37): every money tile shows its change, the trend chart is labelled with what the
governor reclaimed, and the energy of idle GPU time is in the report and the digest with its sources."""

from __future__ import annotations

import re

import pytest

from governor.idle import energy
from governor.idle.power import MEASURED
from governor.policy import Policy
from governor.report.build import team_view, with_history
from governor.report.model import TrendPoint
from governor.report.render.html_page import render_html
from governor.report.render.slack import render_text, slack_messages
from governor_cli.demo.capabilities.report import DEMO_TEAM_BUDGET_USD
from governor_cli.demo.run import TEAMS, demo_policy
from tests.unit.test_report import DAY, _idle, _session, at, sample_ledger
from tests.unit.test_report_views import report_over


def _earlier() -> TrendPoint:
    return TrendPoint(
        kind="daily",
        start=DAY.replace(day=9),
        end=DAY,
        spend_usd=100.0,
        idle_usd=151.0,
        gpu_hours=10.0,
        reclaimed_usd=5.0,
        would_reclaim_usd=0.0,
        idle_energy_kwh=1.0,
    )


def _tiles(page: str) -> list[str]:
    return re.findall(r"<div class='tile[^']*'>(.*?)</div>", page)


def test_every_money_tile_shows_its_change_on_the_report_before() -> None:
    report = with_history(report_over(sample_ledger()), [_earlier()])
    tiles = _tiles(render_html(report))
    money_tiles = [t for t in tiles if "$" in t.split("</b>")[0]]
    assert len(money_tiles) >= 3
    for tile in money_tiles + [t for t in tiles if "GPU-hours</small>" in t or "kWh" in t]:
        assert "vs the period before" in tile or "same as the period before" in tile, tile
    idle = next(t for t in tiles if "idle spend" in t)
    assert "▼" in idle or "▲" in idle


def test_the_first_report_says_there_is_nothing_to_compare_yet() -> None:
    tiles = _tiles(render_html(report_over(sample_ledger())))
    assert sum("no earlier report to compare" in t for t in tiles) >= 4


def test_the_trend_chart_is_labelled_with_periods_money_and_what_was_reclaimed() -> None:
    report = with_history(report_over(sample_ledger()), [_earlier()])
    page = render_html(report)
    chart = page.split("<table class='bars trend'", 1)[1].split("</table>", 1)[0]
    assert "Sun 09 Jul" in chart and "Mon 10 Jul" in chart
    assert "$100.00 spent, $151.00 idle; reclaimed $5.00" in chart
    assert "vs the period before" in chart and "first report" in chart
    assert "reclaimed by the governor" in page.split("<table class='bars trend'", 1)[1]


# --- energy -----------------------------------------------------------------------------------------------------


def test_idle_energy_uses_the_measured_idle_draw_pue_and_the_regions_grid_factor() -> None:
    used = energy.idle_energy(
        [("i-1", "g5.xlarge", 10.0, "eu-west-1"), ("i-2", "p6e-gb200.36xlarge", 8.0, "us-east-1")]
    )
    kwh = 10.0 * MEASURED["NVIDIA A10G"].idle_watts / 1000 * energy.AWS_PUE
    assert used.kwh == pytest.approx(kwh, abs=0.01)
    assert used.co2e_kg == pytest.approx(kwh * 0.2786, abs=0.01)
    assert used.unknown_gpu_hours == 8.0  # GB200: no public idle draw, so not guessed, and said why
    assert used.left_out == {"NVIDIA GB200": energy.NO_SOURCE} and used.gpu_hours == 18.0
    draw = energy.draw_of("Tesla V100-SXM2-16GB")
    assert draw is not None and (draw.idle_watts, draw.busy_watts) == (35.0, 306.0) and "cloud-carbon" in draw.source
    assert energy.grid_factor("xx-nowhere-1") == energy.GRID_KG_PER_KWH["unknown"]


def test_energy_is_in_the_report_the_email_text_and_the_digest() -> None:
    items = [
        _session("i-0a11", "g5.12xlarge", 4, 5.672, "vision", "ana", start=at(0), end=at(9), region="us-west-2"),
        _idle("i-0a11", at(3), "warned", 0.0),
        _idle("i-0a11", at(8), "acted", 0.0),
    ]
    report = report_over(items)
    assert report.cost.idle_energy_kwh > 0 and report.cost.idle_co2e_kg > 0
    assert report.cost.energy.rows[0]["gpu_model"] == "NVIDIA A10G"
    phrase = f"{report.cost.idle_energy_kwh:,.1f} kWh ({report.cost.idle_co2e_kg:,.1f} kg CO2e)"
    assert phrase in render_html(report) and phrase in render_text(report)
    assert phrase in str(slack_messages(report))
    team = team_view(report, "vision")
    assert team.cost.idle_energy_kwh == pytest.approx(report.cost.idle_energy_kwh, abs=0.01)
    assert phrase in str(slack_messages(team))
    assert team_view(report, "nlp").cost.idle_energy_kwh == 0.0


def test_the_demo_gives_each_team_a_budget_unless_the_policy_has_its_own() -> None:
    assert demo_policy(Policy(), enforce=False).budgets.teams == dict.fromkeys(TEAMS, DEMO_TEAM_BUDGET_USD)
    own = Policy.model_validate({"budgets": {"teams": {"vision": 10.0}}})
    assert demo_policy(own, enforce=False).budgets.teams == {"vision": 10.0}
