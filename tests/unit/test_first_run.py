"""A new user's first run: the shipped policy is found from any directory, the demo checks what it needs before the
synth, says what it is doing, and the example policy the README uses is shipped."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from governor.policy import SHIPPED_DEFAULT, Policy, load_policy, resolve_policy
from governor_cli.commands.demo import ProgressLine, check_demo_packages
from governor_cli.main import UsageError, main
from governor_cli.sim.workload import generate
from tests.conftest import CLOUDTRAIL_DIR, ROOT


def test_without_a_policy_file_in_the_folder_the_shipped_default_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    policy, source = resolve_policy(None)
    assert source == SHIPPED_DEFAULT
    assert policy == Policy() == load_policy(ROOT / "governor.yaml")


def test_a_governor_yaml_in_the_folder_wins_over_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "governor.yaml").write_text("idle:\n  window_minutes: 180\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    policy, source = resolve_policy(None)
    assert (source, policy.idle.window_minutes) == ("governor.yaml", 180)


def test_backtest_and_report_run_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    generate(4, hours=3, seed=3).write_csv(tmp_path / "metrics.csv")
    monkeypatch.chdir(tmp_path)
    assert main(["backtest", "--metrics", "metrics.csv", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["instances"] == 4 and summary["policy"]["enforce"] is False
    assert main(["report", "--logs", str(CLOUDTRAIL_DIR), "--out", "out"]) == 0
    assert "2,900 CloudTrail records" in capsys.readouterr().out
    assert (tmp_path / "out" / "report.html").is_file()


def test_the_readme_backlog_policy_is_shipped_and_raises_only_the_bounds() -> None:
    backlog = load_policy(ROOT / "examples" / "backlog.yaml")
    assert (backlog.idle.max_actions_per_sweep, backlog.idle.max_fleet_percent) == (50, 50)
    assert backlog.idle.enforce is False
    assert backlog.model_copy(update={"idle": Policy().idle}) == Policy()


def test_the_demo_names_a_missing_package_before_the_synth(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "moto" else real(name, *a))
    with pytest.raises(UsageError, match=r"moto\[server\].*requirements-demo.txt"):
        check_demo_packages()


def test_progress_is_plain_lines_off_a_terminal() -> None:
    stream = io.StringIO()
    progress = ProgressLine(stream)
    progress("synthesizing")
    progress("simulated hour 1 of 3")
    progress.done()
    assert stream.getvalue() == "synthesizing\nsimulated hour 1 of 3\n"


def test_progress_rewrites_one_line_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    progress = ProgressLine(stream)
    progress("synthesizing the app")
    progress("hour 1 of 3")
    progress.done()
    assert "\n" not in stream.getvalue()
    assert stream.getvalue() == "\rsynthesizing the app" + "\rhour 1 of 3" + " " * 9 + "\r" + " " * 11 + "\r"
