"""CLI conventions, held over every subcommand by walking the real parser (nothing here lists the commands):

- one meaning per flag name: ``--region`` is always the AWS region the command calls, ``--target`` one organisation
  target, ``--table`` the ledger, ``--policy`` a policy file with the same fallback; no ``--account`` or
  ``--table-region`` with another meaning anywhere;
- the shipped policy as the fallback everywhere: ``validate`` and ``explain`` work outside the repository;
- usage that says what is required (``audit`` needs ``--logs`` unless ``--list``);
- an error naming the flag or variable to set instead of botocore's bare "You must specify a region.".
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from governor.adapters.aws import client
from governor_cli import flags
from governor_cli.demo.bootstrap import create_ledger_table
from governor_cli.main import COMMANDS, build_parser, main
from tests.conftest import ROOT

#: Every shared flag and the one help text (hence meaning) it has in every command that takes it.
SHARED = {
    "--region": flags.REGION_HELP,
    "--target": flags.TARGET_HELP,
    "--table": flags.TABLE_HELP,
    "--policy": flags.POLICY_HELP,
    "--only-account": flags.ONLY_ACCOUNT_HELP,
    "--only-region": flags.ONLY_REGION_HELP,
}
#: Names that meant different things in different commands before: gone everywhere.
RETIRED = {"--account", "--table-region"}


def _parsers(parser: argparse.ArgumentParser, path: str = "governor") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def _options() -> list[tuple[str, str, str | None]]:
    found = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            for option in action.option_strings:
                found.append((path, option, action.help))
    return found


def test_every_subcommand_is_walked() -> None:
    walked = {path.split()[1] for path, _ in _parsers(build_parser()) if len(path.split()) > 1}
    assert walked == set(COMMANDS)


def test_one_meaning_per_flag_name_across_every_subcommand() -> None:
    options = _options()
    wrong = [(path, option, text) for path, option, text in options if option in SHARED and text != SHARED[option]]
    assert wrong == []
    assert [(path, option) for path, option, _ in options if option in RETIRED] == []
    takes_region = {path for path, option, _ in options if option == "--region"}
    assert {"governor status", "governor dlq list", "governor idle status", "governor ledger export"} <= takes_region


def test_validate_and_explain_fall_back_to_the_shipped_policy_outside_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["validate"]) == 0
    assert "the shipped default policy" in capsys.readouterr().out
    event = ROOT / "tests/fixtures/events/custodian-event-cloud-trail-run-instances.json"
    assert main(["explain", str(event)]) in (0, 1)
    captured = capsys.readouterr()
    assert "governor.yaml" not in captured.err and captured.out


def test_audit_usage_says_logs_is_required_unless_list(capsys: pytest.CaptureFixture[str]) -> None:
    usage = dict(_parsers(build_parser(["audit"])))["governor audit"].format_usage()
    assert "(--logs DIR | --list)" in usage
    with pytest.raises(SystemExit) as stopped:
        main(["audit"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--logs" in err and "required" in err


def test_no_region_names_the_flag_and_variables_and_aws_region_alone_is_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION")
    assert main(["dlq", "list", "idle"]) == 2
    err = capsys.readouterr().err
    assert "You must specify a region" not in err
    assert "--region" in err and "AWS_REGION" in err and "AWS_DEFAULT_REGION" in err

    monkeypatch.setenv("AWS_REGION", "eu-west-1")  # what the AWS CLI v2 and the SDKs read
    with mock_aws():
        client.cache_clear()  # one Session per process: a new command starts with the environment's region
        create_ledger_table("ledger", "eu-west-1")
        assert main(["ledger", "export", "--table", "ledger", "--out", str(tmp_path / "x.jsonl")]) == 0
        client.cache_clear()


def test_explain_over_a_trail_file_ends_with_a_summary_and_says_would_act_when_report_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    records = [
        json.loads((ROOT / "tests/fixtures/network/modify_rules.json").read_text()),
        *json.loads(next((ROOT / "tests/fixtures/cloudtrail/invictus-aws-dataset").glob("*.json")).read_text())[
            "Records"
        ][:3],
    ]
    trail = tmp_path / "trail.json"
    trail.write_text(json.dumps({"Records": records}))
    assert main(["explain", str(trail), "--policy", str(ROOT / "governor.yaml")]) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    assert out[-1].startswith("4 records: 1 WOULD ACT")
    assert not any(line.endswith("): ACT") for line in out)  # the shipped policy is report-only
    assert any(line.endswith("): WOULD ACT (report-only)") for line in out)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_long_work_shows_a_progress_bar_on_stderr_only_on_a_terminal(
    terminal: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from governor_cli import progress

    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)  # the bar's ~2 s delay, without waiting for it
    rows = ["timestamp,instance_id,metric,value"]
    for minute in range(6 * 60):
        stamp = 1_793_577_600 + 60 * minute
        rows += [f"{stamp},i-0aaa,gpu_utilization,0.2", f"{stamp},i-0aaa,gpu_memory_used,8192"]
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("\n".join(rows) + "\n")
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert main(["backtest", "--metrics", str(metrics), "--json"]) == 0
    json.loads(capsys.readouterr().out)  # stdout holds the JSON and nothing else
    drawn = stderr.getvalue()
    if terminal:
        assert "backtest of 1 instances" in drawn and "sweep" in drawn
    else:
        assert drawn == ""


@pytest.mark.parametrize(
    ("command", "terminal", "quiet"),
    [("audit", True, False), ("audit", False, False), ("audit", True, True), ("report", True, False)],
)
def test_audit_and_report_show_progress_on_stderr_only_on_a_terminal_and_never_with_quiet(
    command: str,
    terminal: bool,
    quiet: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from governor_cli import progress
    from tests.conftest import CLOUDTRAIL_DIR

    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)  # the bar's ~2 s delay, without waiting for it
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.chdir(tmp_path)
    args = ["--logs", str(CLOUDTRAIL_DIR), *(["--quiet"] if quiet else [])]
    if command == "audit":
        assert main(["audit", *args, "--json"]) == 0
        json.loads(capsys.readouterr().out)  # stdout holds the JSON and nothing else
    else:
        assert main(["report", *args, "--out", str(tmp_path / "out")]) == 0
    drawn = stderr.getvalue()
    if terminal and not quiet:
        assert f"{'report: ' if command == 'report' else ''}audit of" in drawn and "step" in drawn
        assert "\r" in drawn  # a bar redrawn in place, cleared at the end (leave=False)
    else:
        assert drawn == ""
