"""The report as people see it: rendered by headless Chromium at 1,400 and 700 px, never wider than the window.

Two real reports: ``governor report`` over the project's CloudTrail records with a ledger export, and the report of a
short report-only demo on the local emulator. Each is screenshotted at both widths (not blank) and measured in the
browser: the page must not scroll sideways, and the first screen must answer "what must I do today, and what did
the GPUs cost, by team?".
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from governor.policy import load_policy
from governor_cli.demo.run import DemoOptions, run_demo
from governor_cli.main import main
from tests.conftest import CLOUDTRAIL_DIR, ROOT
from tests.unit.test_report import sample_ledger

pytestmark = pytest.mark.e2e
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed here (CI installs it)")
WIDTHS = (1400, 700)
FIRST_SCREEN_PX = 900

# Injected into a copy of the page: what the browser measured, written where --dump-dom shows it.
MEASURE = r"""<script>
addEventListener('load', () => {
  const width = innerWidth;
  const name = e => e.tagName.toLowerCase() + (e.className ? '.' + e.className : '');
  // Past the window's right edge, or scrolling inside its own box (an ellipsis clips, it does not scroll).
  const wide = [...document.querySelectorAll('body *')].filter(e => {
    const box = e.getBoundingClientRect();
    return box.right > width + 1 || (e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1
      && ['auto', 'scroll'].includes(getComputedStyle(e).overflowX));
  }).slice(0, 5).map(name);
  const sideways = [...document.querySelectorAll('.wide, table, div')].filter(
    e => e.scrollWidth > e.clientWidth + 1).slice(0, 5).map(name);
  // A word split over two lines (between hyphens, slashes and spaces a line may break; inside a word it must not).
  const broken = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walk.nextNode(); node && broken.length < 5; node = walk.nextNode()) {
    if (node.parentElement.closest('script,style,#measured,svg')) continue;
    for (const m of node.data.matchAll(/[^\s\-\/]{2,}/g)) {
      const range = document.createRange();
      range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
      if (tops.size > 1) { broken.push(m[0]); break; }
    }
  }
  const top = h => { const el = [...document.querySelectorAll('h2,h3')].find(x => x.textContent.startsWith(h));
    return el ? Math.round(el.getBoundingClientRect().top + scrollY) : -1; };
  const out = document.createElement('pre');
  out.id = 'measured';
  out.textContent = JSON.stringify({
    width, scrollWidth: document.documentElement.scrollWidth, wide, sideways, broken,
    height: document.documentElement.scrollHeight,
    todo: document.querySelector('.todo') ? Math.round(document.querySelector('.todo').getBoundingClientRect().bottom) : -1,
    spendByTeam: top('Spend by team'),
  });
  document.body.appendChild(out);
});
</script>"""


#: Gmail clips a message above ~102 KB of HTML; the report's email keeps well under it.
EMAIL_BYTES = 60_000


def assert_fits(measured: dict[str, object]) -> None:
    """Nothing past the window's edge, no container (``.wide`` ones included) scrolling sideways, no word split."""
    assert measured["wide"] == [], f"past the window or scrolling inside its box: {measured['wide']}"
    assert measured["sideways"] == [], f"containers that scroll sideways: {measured['sideways']}"
    assert measured["broken"] == [], f"words broken over two lines: {measured['broken']}"


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def measure(page: Path, width: int) -> dict[str, object]:
    probe = page.with_name(f"measure-{width}.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    done = chromium(
        f"--window-size={width},1000",
        "--virtual-time-budget=5000",
        "--dump-dom",
        probe.as_uri(),
        profile=page.parent / f"profile-m{width}",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r"<pre id=\"measured\">(.*?)</pre>", done.stdout, re.DOTALL)
    assert found, "the measuring script did not run"
    return dict(json.loads(found.group(1).replace("&quot;", '"')))


def screenshot(page: Path, width: int, height: int = 2400) -> Path:
    shot = page.with_name(f"screenshot-{width}.png")
    done = chromium(
        f"--window-size={width},{height}", f"--screenshot={shot}", page.as_uri(), profile=page.parent / f"p{width}"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return shot


def assert_not_blank(shot: Path) -> None:
    with Image.open(shot) as image:
        pixels = image.convert("RGB").resize((300, 400))
        colours = pixels.getcolors(maxcolors=300 * 400) or []
    white = sum(count for count, rgb in colours if min(rgb) >= 250)
    assert len(colours) > 50, f"{shot.name} has almost no distinct colours: the page did not render"
    assert white < 0.97 * 300 * 400, f"{shot.name} is blank"


@pytest.fixture(scope="module")
def cloudtrail_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    ledger = folder / "ledger.jsonl"
    ledger.write_text("\n".join(json.dumps(item) for item in sample_ledger()) + "\n")
    out = folder / "out"
    code = main(
        ["report", "--logs", str(CLOUDTRAIL_DIR), "--ledger", str(ledger), "--out", str(out), "--kind", "daily"]
    )
    assert code == 0
    return out


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo-report")
    run_demo(DemoOptions(policy=load_policy(ROOT / "governor.yaml"), out=out, instances=8, hours=3.0))
    return out


def test_report_command_writes_html_email_slack_csvs_and_chart(cloudtrail_report: Path) -> None:
    for name in ("report.html", "email.html", "email.txt", "report.json", "slack.json", "chart.png"):
        assert (cloudtrail_report / name).is_file(), name
    for name in ("findings.csv", "gpu_hours_by_team.csv", "idle_offenders.csv", "rightsizing.csv"):
        assert (cloudtrail_report / name).read_text().strip(), f"{name} has no header row"
    # A query that matched nothing still gets its real columns as the header row.
    assert (cloudtrail_report / "security_root_account_usage.csv").read_text().startswith("eventtime,eventid,")
    report = json.loads((cloudtrail_report / "report.json").read_text())
    assert report["cost"]["gpu_hours_total"] == pytest.approx(182.0)
    assert (report["start"], report["end"]) == ("2023-07-10T00:00:00Z", "2023-07-11T00:00:00Z")
    with Image.open(cloudtrail_report / "chart.png") as chart:
        assert chart.size == (900, 360)


def test_weekly_covers_seven_days_and_a_second_run_draws_the_trend(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["report", "--logs", str(CLOUDTRAIL_DIR), "--out", str(out), "--kind", "weekly"]
    assert main([*args, "--end", "2023-07-04T00:00:00Z"]) == 0
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    assert (report["start"], report["end"]) == ("2023-07-04T00:00:00Z", "2023-07-11T00:00:00Z")
    assert [t["start"] for t in report["trends"]] == ["2023-06-27T00:00:00Z"]
    assert "Trend over the last 2 weekly reports" in (out / "report.html").read_text()


def test_a_start_that_contradicts_the_kind_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["report", "--logs", str(CLOUDTRAIL_DIR), "--out", str(tmp_path), "--kind", "daily"]
    assert main([*args, "--start", "2023-07-09T00:00:00Z", "--end", "2023-07-11T00:00:00Z"]) == 2
    err = capsys.readouterr().err
    assert "--start must be 2023-07-10T00:00:00+00:00" in err and len(err.strip().splitlines()) == 1


def test_bad_ledger_line_exits_2_naming_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text('{"kind": "session"}\n{not json\n')
    assert main(["report", "--logs", str(CLOUDTRAIL_DIR), "--ledger", str(ledger), "--out", str(tmp_path)]) == 2
    assert "line 2 is not valid JSON" in capsys.readouterr().err


@needs_chromium
@pytest.mark.parametrize("width", WIDTHS)
def test_cloudtrail_report_fits_the_window_and_answers_the_question_on_the_first_screen(
    cloudtrail_report: Path, width: int
) -> None:
    page = cloudtrail_report / "report.html"
    measured = measure(page, width)
    assert measured["scrollWidth"] <= width, f"the page scrolls sideways at {width} px: {measured['wide']}"
    assert_fits(measured)
    assert 0 < int(str(measured["todo"])) < FIRST_SCREEN_PX, "the to-do list is not on the first screen"
    if width == 1400:
        assert 0 < int(str(measured["spendByTeam"])) < FIRST_SCREEN_PX, "spend by team is not on the first screen"
        assert int(str(measured["height"])) < 5000, f"the report is {measured['height']} px tall"
    assert_not_blank(screenshot(page, width))


@needs_chromium
@pytest.mark.parametrize("width", WIDTHS)
def test_demo_report_fits_the_window_and_shows_findings_money_and_the_fleet_chart(
    demo_report: Path, width: int
) -> None:
    page = demo_report / "report.html"
    text = page.read_text(encoding="utf-8")
    for needle in ("Needs attention", "Spend by team", "Fleet GPU-hours", "would reclaim", "<svg"):
        assert needle in text, needle
    measured = measure(page, width)
    assert measured["scrollWidth"] <= width, f"the demo report scrolls sideways at {width} px: {measured['wide']}"
    assert_fits(measured)
    assert 0 < int(str(measured["todo"])) < FIRST_SCREEN_PX
    email = demo_report / "email.html"
    assert email.stat().st_size < EMAIL_BYTES, f"email.html is {email.stat().st_size:,} bytes"
    assert_fits(measure(email, width))
    assert_not_blank(screenshot(page, width))
