"""The idle decision is a table (``governor.idle.table``) that ``decide`` applies once per instance: every state has a
row, every condition a row names has its one test in code, docs/idle.md lists the rows as the code has them, and
``governor explain`` names the row that decided, in words and in ``--json``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import get_args

import pytest

from governor.idle import case
from governor.idle.domain import Status
from governor.idle.table import CONDITIONS, DEFERRED, HELD, ROWS, TABLE, row_for
from governor_cli.main import main
from tests.conftest import ROOT
from tests.unit.test_explain_nodes import INSTANCE, _events, _write

INSTANCES = {
    "Reservations": [
        {
            "Instances": [
                {
                    "InstanceId": "i-0abc12345678",
                    "InstanceType": "p5.48xlarge",
                    "State": {"Name": "running"},
                    "LaunchTime": "2026-11-01T00:00:00Z",
                    "InstanceLifecycle": "capacity-block",
                    "CapacityReservationId": "cr-0a1b2c3d4e5f60718",
                    "Tags": [{"Key": "owner", "Value": "ana@example.com"}],
                },
                {
                    "InstanceId": "i-0def12345678",
                    "InstanceType": "g5.xlarge",
                    "State": {"Name": "running"},
                    "LaunchTime": "2026-11-01T00:00:00Z",
                    "Tags": [{"Key": "owner", "Value": "bo@example.com"}, {"Key": "gpu-fleet", "Value": "true"}],
                },
            ]
        }
    ]
}


def test_every_state_has_a_row_and_every_condition_one_test() -> None:
    for status in get_args(Status):
        assert row_for(status, lambda condition: False).statuses == {status}
    named = {c for row in TABLE for c in row.when}
    assert named == set(CONDITIONS)
    assert {c for row in ROWS for c in row.when} == set(case.CONDITION_TESTS)  # HELD and DEFERRED are the sweep's
    assert [row.name for row in TABLE] == list(dict.fromkeys(row.name for row in TABLE))  # names are unique
    assert TABLE[-2:] == (HELD, DEFERRED)


def test_the_docs_list_the_rows_in_the_codes_order() -> None:
    text = (ROOT / "docs" / "idle.md").read_text(encoding="utf-8")
    section = text.split("### The decision table", 1)[1].split("\n#", 1)[0]
    listed = re.findall(r"^\| (\d+) \| `([^`]+)` \| ([^|]+) \|", section, re.MULTILINE)
    assert [(int(n), name, status.strip()) for n, name, status in listed] == [
        (row.number, row.name, ", ".join(sorted(row.statuses))) for row in TABLE
    ]


def test_explain_instances_names_the_row_that_decided(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(INSTANCES))
    assert main(["explain", "--instances", str(path), "--json"]) == 0
    block, plain = json.loads(capsys.readouterr().out)["decisions"]
    assert (block["rule"]["name"], block["rule"]["rule"], block["rule"]["verdict"]) == (
        "report to the owner",
        "idle.reported",
        "act",
    )
    assert block["rule"]["when"] == [CONDITIONS["report only"]]
    assert [a["type"] for a in block["actions"]] == ["notify"]
    assert (plain["rule"]["name"], plain["rule"]["rule"]) == ("reclaim", "idle.acted")
    assert [a["type"] for a in plain["actions"]] == ["stop", "tag"]
    assert main(["explain", "--instances", str(path)]) == 0
    out = capsys.readouterr().out
    assert "rule: idle table row 21 (report to the owner): status idle, when its capacity may only be reported" in out
    assert "rule: idle table row 24 (reclaim): status idle, no earlier row matched -> idle.acted, act" in out


def test_explain_metrics_names_the_row_that_decided(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _events(3 * 60, busy_until=150))
    assert main(["explain", "--metrics", str(path), "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    (decision,) = result["decisions"]
    assert decision["rule"]["name"] == "busy" and decision["rule"]["rule"] == "idle.busy"
    assert result["event"]["id"].startswith(INSTANCE)
