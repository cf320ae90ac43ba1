"""Issue 48, item 2: the printed rerun reproduces the money. A report saves its inputs (``inputs.json``: the rates it
priced with, its period and policy); ``governor report --inputs`` prices from them, so a rerun on a laptop without
AWS credentials says the same dollars, and a live read that fails is said in words, never as an exception text.

The first run reads Cost Explorer on moto (its documented cost-and-usage results queue), as the demo reads its
emulator's; the rerun runs with no credentials at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from governor.adapters.aws import client
from governor_cli.main import main
from tests.adapters.test_effective_rates import PLAN, queue
from tests.unit.test_report import _idle, _session
from tests.unit.test_report_period import _at, _ledger, _trail

START, END = "2026-12-04T03:00:00Z", "2026-12-04T15:00:00Z"


def _run(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A 12-hour day: a g5.12xlarge (Savings Plan: $3.40 an hour amortised, $5.672 list) idle from hour 4, warned."""
    logs = _trail(tmp_path, "2026-12-04T03:00:00Z", "2026-12-04T05:00:00Z")
    items: list[dict[str, Any]] = [
        {**_session("i-0a", "g5.12xlarge", 4, 5.672, "nlp", "bo", start=_at(0)), "at": _at(0)},
        *(_idle("i-0a", _at(h / 4), "busy", 50.0) for h in range(1, 16)),
        *(_idle("i-0a", _at(h / 4), "idle", 0.0) for h in range(16, 24)),
        _idle("i-0a", _at(6), "warned", 0.0, idle_since=_at(4)),
    ]
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"pricing": {"effective_rates": "cost_explorer"}}))
    return logs, _ledger(tmp_path, items), policy


def _without_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A laptop that never had AWS credentials: none in the environment, the files or the instance metadata."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client.cache_clear()


def test_the_rerun_with_the_saved_inputs_gives_the_same_money_without_aws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs, ledger, policy = _run(tmp_path)
    first, again, live = tmp_path / "first", tmp_path / "again", tmp_path / "live"
    base = ["report", "--logs", str(logs), "--ledger", str(ledger)]
    client.cache_clear()
    with mock_aws():
        queue(PLAN)
        assert main([*base, "--policy", str(policy), "--start", START, "--end", END, "--out", str(first)]) == 0
    made = json.loads((first / "report.json").read_text())["cost"]
    assert made["cost_total_usd"] == pytest.approx(12 * 3.4, abs=0.01)  # priced at what the account pays
    assert made["idle_cost_usd"] > 0

    _without_credentials(monkeypatch, tmp_path)
    assert main([*base, "--inputs", str(first / "inputs.json"), "--out", str(again)]) == 0  # the printed rerun
    rerun = json.loads((again / "report.json").read_text())
    figures = ("gpu_hours_total", "cost_total_usd", "idle_cost_usd", "would_save_usd", "would_reclaim_gpu_hours")
    assert {k: rerun["cost"][k] for k in figures} == {k: made[k] for k in figures}
    assert (rerun["start"], rerun["end"]) == ("2026-12-04T03:00:00Z", "2026-12-04T15:00:00Z")
    assert any(
        n.startswith("priced with the inputs recorded by the report of 2026-12-04 03:00") for n in rerun["notes"]
    )

    # without the inputs, the live read fails: said in words, and the figures say what they were priced at instead
    assert main([*base, "--policy", str(policy), "--start", START, "--end", END, "--out", str(live)]) == 0
    cost = json.loads((live / "report.json").read_text())["cost"]
    assert cost["cost_total_usd"] == pytest.approx(12 * 5.672, abs=0.01)  # list prices, and it says so
    notes = cost["notes"]
    assert (
        "Cost Explorer could not be read (no AWS credentials): priced at the prices recorded with each usage "
        "session, else list prices"
    ) in notes
    assert not any("NoCredentialsError" in n or "Unable to locate" in n for n in notes)
