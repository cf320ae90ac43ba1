"""`governor report` over the shared CloudTrail records and a ledger export, opened in headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from governor.cli import main
from tests.conftest import CLOUDTRAIL_DIR
from tests.unit.test_report import sample_ledger

pytestmark = pytest.mark.e2e
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    ledger = folder / "ledger.jsonl"
    ledger.write_text("\n".join(json.dumps(item) for item in sample_ledger()) + "\n")
    out = folder / "out"
    code = main(
        [
            "report",
            "--logs",
            str(CLOUDTRAIL_DIR),
            "--ledger",
            str(ledger),
            "--out",
            str(out),
            "--start",
            "2023-07-10T00:00:00Z",
            "--end",
            "2023-07-11T00:00:00Z",
            "--kind",
            "daily",
        ]
    )
    assert code == 0
    return out


def test_report_command_writes_html_slack_csvs_and_chart(rendered: Path) -> None:
    for name in ("report.html", "report.json", "slack.json", "chart.png", "gpu_hours_by_team.csv", "rightsizing.csv"):
        assert (rendered / name).is_file(), name
    messages = json.loads((rendered / "slack.json").read_text())
    assert messages and all(len(m["blocks"]) <= 50 for m in messages)
    report = json.loads((rendered / "report.json").read_text())
    assert report["cost"]["gpu_hours_total"] == pytest.approx(182.0)
    with Image.open(rendered / "chart.png") as chart:
        assert chart.size == (900, 360)


def test_bad_ledger_line_exits_2_naming_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text('{"kind": "session"}\n{not json\n')
    assert main(["report", "--logs", str(CLOUDTRAIL_DIR), "--ledger", str(ledger), "--out", str(tmp_path)]) == 2
    assert "line 2 is not valid JSON" in capsys.readouterr().err


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed here (CI installs it in .ci/run)")
def test_rendered_html_opens_in_headless_chromium_and_is_not_blank(rendered: Path) -> None:
    shot = rendered / "screenshot.png"
    done = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={rendered / 'chromium-profile'}",
            "--window-size=1200,1600",
            f"--screenshot={shot}",
            (rendered / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with Image.open(shot) as image:
        pixels = image.convert("RGB").resize((300, 400))
        colours = pixels.getcolors(maxcolors=300 * 400) or []
    white = sum(count for count, rgb in colours if min(rgb) >= 250)
    assert len(colours) > 50, "the screenshot has almost no distinct colours: the page did not render"
    assert white < 0.97 * 300 * 400, "the screenshot is blank"
