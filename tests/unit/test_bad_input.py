"""What a user sees when the input is wrong (issue 20): the message names the file, line or field and the fix;
and what they get when the input is unusual but right (stdin, a whole CloudTrail file, a metrics file with gaps)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from governor.policy import PolicyError, parse_policy_text
from governor_cli.commands.backtest import parse_interval, parse_metrics, replay_stretches
from governor_cli.main import main
from governor_cli.sim.replay import replay
from tests.conftest import ROOT

POLICY = str(ROOT / "governor.yaml")
RECORD = json.loads((ROOT / "tests/fixtures/network/authorize_nested.json").read_text(encoding="utf-8"))


def _record(name: str = "AuthorizeSecurityGroupIngress") -> dict[str, object]:
    detail = RECORD.get("detail", RECORD)
    return {**detail, "eventName": name}


def test_explain_reads_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(RECORD)))
    assert main(["explain", "-", "--policy", POLICY, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decisions"]


def test_explain_of_a_whole_trail_file_gives_one_result_per_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trail = tmp_path / "trail.json"
    trail.write_text(json.dumps({"Records": [_record(), _record("DescribeInstances"), _record()]}), encoding="utf-8")
    assert main(["explain", str(trail), "--policy", POLICY, "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["event"]["kind"] for r in results] == [
        "AuthorizeSecurityGroupIngress",
        "DescribeInstances",
        "AuthorizeSecurityGroupIngress",
    ]
    assert results[1]["verdict"] == "ignored"


def test_a_bad_record_in_a_trail_file_is_named_by_its_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trail = tmp_path / "trail.json"
    trail.write_text(json.dumps({"Records": [_record(), {"eventName": "RunInstances"}]}), encoding="utf-8")
    assert main(["explain", str(trail), "--policy", POLICY]) == 2
    assert f"{trail}: Records[1]: invalid CloudTrailRecord" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["valdate"], "did you mean 'validate'?"),
        (
            ["ledger", "export", "--table", "governor-ledger", "--out", "/tmp/x.jsonl", "--kind", "decison"],
            "did you mean 'decision'?",
        ),
        (["audit", "--logs", ".", "--query", "root_acount_usage"], "did you mean 'root_account_usage'?"),
        (["report", "--logs", ".", "--out", "/tmp/x", "--kind", "dialy"], "did you mean 'daily'?"),
    ],
)
def test_unknown_names_get_the_closest_known_one(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own checks (subcommands, choices) exit through the parser
        code = exit_.code if isinstance(exit_.code, int) else -1
    assert code == 2
    err = capsys.readouterr().err
    assert hint in err and err.count("\n") == 1


def test_ledger_export_refuses_an_unknown_kind_before_reading_aws(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "export", "--table", "governor-ledger", "--out", "/tmp/x.jsonl", "--kind", "bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such ledger item kind" in err and "decision" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("idle:\n  enforce: false\n  enforce: true\n", "line 3: duplicate key 'enforce' (first at line 2)"),
        (
            "pricing:\n  prices_as_of: 2026-02-30\n",
            "line 2: invalid date '2026-02-30' (day is out of range for month)",
        ),
        ("pricing:\n  prices_as_of: 2026-13-45\n", "line 2: invalid date '2026-13-45'"),
        ("ledger:\n  retention_days: 100000000000\n", "ledger.retention_days: Input should be less than or equal to"),
        ("idle:\n  windw_minutes: 60\n", "idle.windw_minutes: unknown field (did you mean 'window_minutes'?)"),
        ("idle:\n  schedule: every now and then\n", "idle.schedule: 'every now and then' is not a schedule"),
        ("audit:\n  expire_after_days: 30\n", "expire_after_days must be greater than transition"),
    ],
)
def test_policy_errors_name_the_line_or_field(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(text, "p.yaml")
    assert str(caught.value).startswith("p.yaml: ") and message in str(caught.value)


def test_merge_keys_may_override_what_they_merge() -> None:
    text = "idle: &base\n  window_minutes: 60\nspot:\n  reserved_concurrency: 5\n"
    assert parse_policy_text(text).idle.window_minutes == 60


def _csv(*rows: tuple[int, str, float]) -> list[str]:
    """GPU utilisation as given, GPU memory steady (an idle machine shows both)."""
    lines = [f"{t},{i},gpu_utilization,{v}" for t, i, v in rows] + [f"{t},{i},gpu_memory_used,2048" for t, i, _ in rows]
    return ["timestamp,instance_id,metric,value", *lines]


def test_backtest_skips_the_stretch_between_two_days_of_data_without_changing_what_it_finds() -> None:
    policy = parse_policy_text((ROOT / "governor.yaml").read_text(encoding="utf-8"))
    day = 1_764_547_200  # 2025-12-01T00:00:00Z
    first = [(day + 60 * m, "i-0abc", 0.5) for m in range(300)]  # five idle hours
    later = [(day + 400 * 86_400 + 60 * m, "i-0abc", 90.0) for m in range(300)]  # a busy day 400 days later
    interval = parse_interval("15m")
    alone = replay(parse_metrics(_csv(*first)), policy, **_span(first), interval=interval)
    both, gaps = replay_stretches(parse_metrics(_csv(*first, *later)), policy, interval)
    assert len(gaps) == 1
    assert both.instances["i-0abc"].actions == alone.instances["i-0abc"].actions != []
    assert both.sweeps == alone.sweeps + len(range(15 * 60, 300 * 60 + 1, 15 * 60))  # not 400 days of sweeps


def _span(rows: list[tuple[int, str, float]]) -> dict[str, object]:
    import datetime as dt

    return {
        "start": dt.datetime.fromtimestamp(rows[0][0], dt.UTC),
        "end": dt.datetime.fromtimestamp(rows[-1][0] + 60, dt.UTC),
    }


@pytest.mark.parametrize(
    ("stamp", "message"),
    [
        ("1764583200000", "epoch milliseconds? use seconds"),
        ("9999-12-31T23:59:59Z", "outside the supported range 1970-01-01T00:00:00Z .. 2199-12-31T23:59:59Z"),
        ("1e20", "is neither ISO 8601 nor epoch seconds"),
    ],
)
def test_backtest_names_the_line_of_a_time_out_of_range(
    tmp_path: Path, stamp: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.csv"
    path.write_text(f"timestamp,instance_id,metric,value\n{stamp},i-0abc,gpu_utilization,1\n", encoding="utf-8")
    assert main(["backtest", "--metrics", str(path), "--policy", POLICY]) == 2
    err = capsys.readouterr().err
    assert f"{path}: line 2: timestamp" in err and message in err


def test_audit_fail_on_rows_over_no_records_fails_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--logs", str(tmp_path), "--fail-on-rows"]) == 2
    assert "no CloudTrail records to check" in capsys.readouterr().err


def test_validate_ranges_lists_every_number_and_date_with_both_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.reliability.test_fuzz_commands import NUMERIC

    assert main(["validate", "--ranges"]) == 0
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    for path in NUMERIC:
        line = listed[".".join(path)]
        assert (">" in line and "<" in line) or " .. " in line, line
    assert "pricing.prices.<name>.gpus" in listed
