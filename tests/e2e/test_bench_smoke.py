"""The latency benches still do what their figures claim: a world-open rule is revoked, a checkpoint is sent.

Both benches went silent for a while (the network bench judged its instance-less groups out of ``network.scope:
fleet``; the Spot bench's instances lacked ``fleet.fleet_tags``, so no SendCommand was allowed) and nothing failed,
because benches are not tests. These run each bench at its smallest size in a fresh process and check the outcome
it prints, never a time.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_network_latency_bench_revokes_every_rule_it_opens() -> None:
    out = _bench("bench.network_latency", "--events", "3", "--groups", "2")
    assert "revoked: 3/3; world-open ingress rules left: 0" in out


def test_spot_latency_bench_sends_one_checkpoint_per_warning() -> None:
    out = _bench("bench.spot_latency", "--events", "3", "--instances", "3")
    assert "SSM commands sent: 3 (one per event id)" in out


def test_backtest_fleet_bench_reads_a_csv_through_a_pipe_with_the_files_decisions(tmp_path: Path) -> None:
    """The 10,000 x 30-day CSV is measured through a named pipe fed by zstd: at a small size the pipe and the file
    give the same decisions."""
    common = ("--instances", "30", "--days", "0.25", "--dir", str(tmp_path), "--csv-only")
    piped = _bench("bench.backtest_fleet", *common, "--pipe")
    plain = _bench("bench.backtest_fleet", *common)
    decisions = [line for line in (piped + plain).splitlines() if line.strip().startswith("decisions:")]
    assert len(decisions) == 2 and decisions[0] == decisions[1] and "'instances': 30" in decisions[0]
