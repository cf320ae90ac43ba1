"""Regenerate docs/img/ from real runs: ``make screenshots`` (headless Chromium, matplotlib, the local emulator).

- ``report-cloudtrail-1400.png`` / ``-700.png``: ``governor report --kind daily`` over the project's CloudTrail
  records with the sample ledger export of ``tests/unit/test_report.py``;
- ``report-demo-1400.png``: the report of a report-only ``governor demo`` (12 instances, 6 simulated hours), whole;
  ``report-demo-top.png`` its first screen at 1,400 px (the README's picture) and ``report-demo-700.png`` at 700 px;
- ``report-chart.png``: the fleet chart PNG the email carries.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from PIL import Image

from governor.policy import load_policy
from governor_cli.demo.run import DemoOptions, run_demo
from governor_cli.main import main as governor
from tests.conftest import CLOUDTRAIL_DIR, ROOT
from tests.e2e.test_report_render import CHROMIUM, measure, screenshot
from tests.unit.test_report import sample_ledger

IMG = ROOT / "docs" / "img"


def shoot(page: Path, width: int, name: str, full: bool) -> None:
    height = min(int(str(measure(page, width)["height"])), 6000) if full else 1000
    shot = screenshot(page, width, height)
    with Image.open(shot) as image:  # 256 colours: a third of the bytes, no visible loss for a report
        image.convert("RGB").quantize(256).save(IMG / name, optimize=True)
    print(f"wrote docs/img/{name} ({width} x {height})")


def main(argv: list[str] | None = None) -> int:
    """``--no-demo`` skips the demo (minutes on a busy machine) and keeps its image."""
    skip_demo = "--no-demo" in (sys.argv[1:] if argv is None else argv)
    if CHROMIUM is None:
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    IMG.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        ledger = folder / "ledger.jsonl"
        ledger.write_text("\n".join(json.dumps(item) for item in sample_ledger()) + "\n", encoding="utf-8")
        out = folder / "cloudtrail"
        args = ["report", "--logs", str(CLOUDTRAIL_DIR), "--ledger", str(ledger), "--out", str(out)]
        if governor([*args, "--kind", "daily"]) != 0:
            return 1
        shoot(out / "report.html", 1400, "report-cloudtrail-1400.png", full=True)
        shoot(out / "report.html", 700, "report-cloudtrail-700.png", full=False)
        shutil.copyfile(out / "chart.png", IMG / "report-chart.png")
        if skip_demo:
            return 0
        demo = folder / "demo"
        run_demo(DemoOptions(policy=load_policy(ROOT / "governor.yaml"), out=demo, instances=12, hours=6.0))
        shoot(demo / "report.html", 1400, "report-demo-1400.png", full=True)
        shoot(demo / "report.html", 1400, "report-demo-top.png", full=False)
        shoot(demo / "report.html", 700, "report-demo-700.png", full=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
