"""The report's period is explicit and the same everywhere (issue 37): ``governor report`` over a demo's trail and
ledger covers the demo's period, not only the trail's span, and says which part the trail leaves out; hostile times
end in one line and exit 2, never a traceback."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from governor.audit.engine import event_span
from governor_cli.main import main
from tests.unit.test_report import _idle, _session

START = dt.datetime(2026, 12, 4, 3, tzinfo=dt.UTC)


def _at(hours: float) -> str:
    return (START + dt.timedelta(hours=hours)).isoformat()


def _trail(folder: Path, *times: str) -> Path:
    """CloudTrail files as delivered: one RunInstances record per time."""
    logs = folder / "cloudtrail"
    day = logs / "AWSLogs" / "123456789012" / "CloudTrail" / "us-east-1" / "2026" / "12" / "04"
    day.mkdir(parents=True)
    records = [
        {
            "eventVersion": "1.09",
            "eventTime": when,
            "eventSource": "ec2.amazonaws.com",
            "eventName": "DescribeInstances",
            "awsRegion": "us-east-1",
            "eventID": f"e{n}",
            "readOnly": True,
            "userIdentity": {"type": "IAMUser", "arn": "arn:aws:iam::123456789012:user/ana"},
            "recipientAccountId": "123456789012",
        }
        for n, when in enumerate(times)
    ]
    with gzip.open(day / "trail.json.gz", "wt") as handle:
        json.dump({"Records": records}, handle)
    return logs


def _ledger(folder: Path, items: list[dict[str, Any]]) -> Path:
    path = folder / "ledger.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def demo_like(folder: Path) -> tuple[Path, Path]:
    """A 12-hour run whose trail holds only the first two hours' calls (the demo's shape)."""
    logs = _trail(folder, "2026-12-04T03:00:00Z", "2026-12-04T05:00:00Z")
    items = [
        {**_session("i-0a", "g5.xlarge", 1, 1.0, "nlp", "bo", start=_at(0)), "at": _at(0)},
        *(_idle("i-0a", _at(h / 4), "busy", 50.0) for h in range(1, 49)),
    ]
    return logs, _ledger(folder, items)


def test_report_covers_the_trail_and_the_ledger_together_and_says_what_the_trail_misses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs, ledger = demo_like(tmp_path)
    out = tmp_path / "out"
    assert main(["report", "--logs", str(logs), "--ledger", str(ledger), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (report["start"], report["end"]) == ("2026-12-04T03:00:00Z", "2026-12-04T15:00:00Z")
    assert report["cost"]["gpu_hours_total"] == pytest.approx(12.0)
    [note] = [n for n in report["notes"] if "CloudTrail records cover only" in n]
    assert "2026-12-04 03:00:00 to 2026-12-04 05:00:00 UTC" in note
    assert "CloudTrail records cover only" in (out / "report.html").read_text()
    assert "CloudTrail records cover only" in capsys.readouterr().out


def test_an_explicit_period_says_what_of_the_ledger_it_leaves_out(tmp_path: Path) -> None:
    logs, ledger = demo_like(tmp_path)
    out = tmp_path / "out"
    args = ["report", "--logs", str(logs), "--ledger", str(ledger), "--out", str(out)]
    assert main([*args, "--start", "2026-12-04T03:00:00Z", "--end", "2026-12-04T05:00:00Z"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["cost"]["gpu_hours_total"] == pytest.approx(2.0)
    assert any("ledger records outside this period left out: 0 before it, 40 after it" in n for n in report["notes"])


def test_without_a_ledger_the_period_is_the_trails_own_span(tmp_path: Path) -> None:
    logs = _trail(tmp_path, "2026-12-04T03:00:00Z", "2026-12-04T05:00:00Z")
    out = tmp_path / "out"
    assert main(["report", "--logs", str(logs), "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (report["start"], report["end"]) == ("2026-12-04T03:00:00Z", "2026-12-04T05:00:01Z")
    assert not any("cover only" in n for n in report["notes"])


def test_a_trail_with_records_all_day_covers_its_daily_period(tmp_path: Path) -> None:
    logs = _trail(tmp_path, "2026-12-04T00:10:00Z", "2026-12-04T12:00:00Z", "2026-12-04T23:50:00Z")
    out = tmp_path / "out"
    assert main(["report", "--logs", str(logs), "--out", str(out), "--kind", "daily"]) == 0
    assert not any("cover only" in n for n in json.loads((out / "report.json").read_text())["notes"])


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"])
@pytest.mark.parametrize("kind", ["custom", "daily", "weekly"])
def test_a_time_no_period_can_hold_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], when: str, kind: str
) -> None:
    logs = _trail(tmp_path, when)
    assert main(["report", "--logs", str(logs), "--out", str(tmp_path / "out"), "--kind", kind]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no CloudTrail record with a time in 1970-01-01 .. 2200-01-01" in err


def test_the_trails_span_ignores_times_outside_every_period(tmp_path: Path) -> None:
    logs = _trail(tmp_path, "9999-12-31T23:59:59Z", "2026-12-04T03:00:00Z", "0001-01-01T00:00:00Z")
    span = event_span(logs)
    assert span is not None and span[0] == span[1] == START


def test_audit_says_its_default_range_is_the_records_own_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = _trail(tmp_path, "2026-12-04T03:00:00Z", "2026-12-04T05:00:00Z")
    assert main(["audit", "--logs", str(logs)]) == 0
    out = capsys.readouterr().out
    assert "range 2026-12-04T03:00:00Z .. 2026-12-04T05:00:01Z" in out
    assert "the range is the records' own span" in out and "give --start and --end" in out
    assert main(["audit", "--logs", str(logs), "--start", "2026-12-04T03:00:00Z", "--end", "2026-12-04T15:00:00Z"]) == 0
    assert "records' own span" not in capsys.readouterr().out
