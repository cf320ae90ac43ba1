"""``governor audit``: output formats and exit codes as an operator sees them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from governor_cli.main import main
from tests.conftest import CLOUDTRAIL_DIR

LOGS = str(CLOUDTRAIL_DIR)


def test_json_prints_count_and_rows_per_query(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["audit", "--logs", LOGS, "--query", "world_open_ingress", "--query", "root_account_usage", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert list(out) == ["world_open_ingress", "root_account_usage"]
    assert out["world_open_ingress"]["count"] == len(out["world_open_ingress"]["rows"]) == 2
    assert out["world_open_ingress"]["rows"][0]["world_cidrs"] == "0.0.0.0/0"
    assert out["root_account_usage"] == {"count": 0, "rows": []}


def test_range_narrows_the_rows(capsys: pytest.CaptureFixture[str]) -> None:
    main(["audit", "--logs", LOGS, "--query", "vpc_changes", "--json"])
    everything = json.loads(capsys.readouterr().out)["vpc_changes"]["count"]
    window = ["--start", "2023-07-10T12:00:00Z", "--end", "2023-07-10T12:10:00Z"]
    main(["audit", "--logs", LOGS, "--query", "vpc_changes", "--json", *window])
    rows = json.loads(capsys.readouterr().out)["vpc_changes"]["rows"]
    assert 0 < len(rows) < everything
    assert all("2023-07-10T12:00:00Z" <= r["eventtime"] < "2023-07-10T12:10:00Z" for r in rows)


def test_csv_has_a_query_column_and_one_line_per_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["audit", "--logs", LOGS, "--query", "gpu_instance_launches", "--query", "world_open_ingress", "--csv"])
        == 0
    )
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["query"] for r in rows] == ["gpu_instance_launches"] * 2 + ["world_open_ingress"] * 2
    assert rows[0]["instance_type"] == "p2.xlarge" and rows[0]["errorcode"] == "Client.VcpuLimitExceeded"


def test_text_output_summarises_each_query_and_the_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--logs", LOGS, "--query", "console_login_without_mfa"]) == 0
    out = capsys.readouterr().out
    assert "console_login_without_mfa [CIS 4.2]: 1 row" in out
    assert "2900 records from 55 files opened" in out


def test_unknown_query_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--logs", LOGS, "--query", "no_such_query"]) == 2
    assert "unknown query no_such_query" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--start", "last tuesday"], ["--end", "2023-13-40"]])
def test_bad_times_are_bad_input(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    assert main(["audit", "--logs", LOGS, *args]) == 2
    err = capsys.readouterr().err
    assert "not an ISO 8601 time" in err and "Traceback" not in err


def test_missing_folder_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["audit", "--logs", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:  # argparse: the usage says --logs is required
        main(["audit"])
    assert stopped.value.code == 2 and "--logs" in capsys.readouterr().err


def test_fail_on_rows_is_the_only_way_to_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--logs", LOGS, "--query", "world_open_ingress", "--json"]) == 0
    assert main(["audit", "--logs", LOGS, "--query", "world_open_ingress", "--fail-on-rows", "--json"]) == 1
    assert main(["audit", "--logs", LOGS, "--query", "root_account_usage", "--fail-on-rows", "--json"]) == 0


def test_skipped_files_are_named_on_stderr(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    good = sorted(CLOUDTRAIL_DIR.glob("*.json"))[0]
    (tmp_path / good.name).write_bytes(good.read_bytes())
    assert main(["audit", "--logs", str(tmp_path), "--query", "unauthorized_api_calls", "--json"]) == 0
    captured = capsys.readouterr()
    assert "skipped" in captured.err and "bad.json" in captured.err
    assert json.loads(captured.out)["unauthorized_api_calls"]["count"] >= 0


def test_list_shows_every_query(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--list"]) == 0
    out = capsys.readouterr().out
    assert "unauthorized_api_calls" in out and "CIS 4.1" in out and "gpu_instance_hours" in out
