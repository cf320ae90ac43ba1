"""How the report scales with the fleet: build, HTML, PNG and Slack for N instances over one day of 15-minute sweeps.

``python -m bench.report_render [--instances 1000]`` prints the time of each step (median of ``--runs``), the page's
size and table rows, and peak Python memory. Not part of the test run; the test suite asserts what the reader sees at
1,000 instances (``tests/unit/test_report_views.py``), not how long it takes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
import tracemalloc
from typing import Any

from bench.common import median
from governor.policy import Policy
from governor.report.build import build_report
from governor.report.chart_image import render_fleet_png
from governor.report.render.csv_files import csv_files
from governor.report.render.html_page import render_html
from governor.report.render.slack import slack_messages

DAY = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)


def fleet(instances: int, sweep_minutes: int = 15) -> list[dict[str, Any]]:
    """A third busy, a third idle from 06:00 and stopped report-only at 08:00, a third unmonitored."""
    items: list[dict[str, Any]] = []
    sweeps = 24 * 60 // sweep_minutes
    for n in range(instances):
        instance = f"i-{n:017x}"
        items.append(
            {
                "kind": "session",
                "instance_id": instance,
                "instance_type": "g5.12xlarge",
                "gpus": 4,
                "team": f"team-{n % 40}",
                "owner": f"arn:aws:sts::123456789012:assumed-role/ml/user{n % 300}",
                "start": DAY.isoformat(),
                "end": None,
                "price_per_hour": 5.672,
                "on_demand_per_hour": 5.672,
            }
        )
        if n % 3 == 2:
            continue
        for s in range(sweeps):
            at = DAY + dt.timedelta(minutes=s * sweep_minutes)
            idle = n % 3 == 1 and at.hour >= 6
            status = "busy" if not idle else ("warned" if at.hour == 7 and at.minute == 0 else "idle")
            acted = idle and at.hour == 8 and at.minute == 0
            items.append(
                {
                    "kind": "decision",
                    "policy": "idle",
                    "resource": instance,
                    "at": at.isoformat(),
                    "verdict": "act" if status == "warned" or acted else "ok",
                    "severity": "warning" if status == "warned" or acted else "info",
                    "rule": f"idle.{'acted' if acted else status}",
                    "reasons": [f"idle policy: {status}"],
                    "actions": [{"type": "stop", "enforced": False}] if acted else [],
                    "evidence": {
                        "status": "acted" if acted else status,
                        "max_gpu_utilization": 1.0 if idle else 70.0,
                        "window_minutes": 60 if idle else 0,
                        **({"idle_since": (DAY + dt.timedelta(hours=6)).isoformat()} if idle else {}),
                    },
                }
            )
    return items


def timed(step: Any, runs: int) -> tuple[float, Any]:
    seconds, result = [], None
    for _ in range(runs):
        began = time.perf_counter()
        result = step()
        seconds.append(time.perf_counter() - began)
    return median(seconds), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    items = fleet(args.instances)
    end = DAY + dt.timedelta(days=1)
    tracemalloc.start()
    build_s, report = timed(
        lambda: build_report(kind="daily", start=DAY, end=end, policy=Policy(), audit={}, ledger_items=items), args.runs
    )
    html_s, page = timed(lambda: render_html(report), args.runs)
    png_s, png = timed(
        lambda: render_fleet_png(report.charts, title="fleet", period=(report.start, report.end)), args.runs
    )
    slack_s, messages = timed(lambda: slack_messages(report), args.runs)
    csv_s, files = timed(lambda: csv_files(report), args.runs)
    _, peak = tracemalloc.get_traced_memory()
    print(f"report over {args.instances:,} instances, {len(items):,} ledger items (one day, 15-minute sweeps)")
    print(f"  build_report   {build_s * 1000:8.0f} ms")
    print(
        f"  render_html    {html_s * 1000:8.0f} ms  {len(page.encode()) / 1024:,.0f} KB, {page.count('<tr>')} table rows"
    )
    print(f"  fleet PNG      {png_s * 1000:8.0f} ms  {len(png) / 1024:,.0f} KB")
    print(f"  Slack digest   {slack_s * 1000:8.0f} ms  {len(messages)} message, {len(json.dumps(messages)):,} bytes")
    print(
        f"  CSVs           {csv_s * 1000:8.0f} ms  {len(files)} files, {sum(map(len, files.values())) / 1024:,.0f} KB"
    )
    print(f"  peak Python memory {peak / 2**20:,.0f} MiB")


if __name__ == "__main__":
    main()
