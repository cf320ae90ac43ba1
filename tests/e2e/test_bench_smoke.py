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


def test_org_round_bench_sweeps_every_account_region_through_the_queue_and_assumed_roles() -> None:
    """bench.org_round at its smallest: the planner's messages all consumed, each target swept in its own account and
    region through the spoke role (AssumeRole counted), the idle instances warned (report-only)."""
    out = _bench("bench.org_round", "--accounts", "2", "--regions", "2", "--instances", "40", "--concurrency", "2")
    assert "4 target invocations" in out and "0 item failures, 4 account-regions swept, 40 instances" in out
    assert "'warned':" in out and "sts:AssumeRole                             3" in out
    assert "ROUND, maximum_concurrency 2: wall to the last decision" in out


def test_org_round_bench_says_when_it_swept_a_sample_and_models_the_rest() -> None:
    """With --sample the report never calls the sampled walls the round: it names how many targets were swept and
    labels the whole round's figure MODELLED."""
    out = _bench("bench.org_round", "--accounts", "2", "--regions", "2", "--instances", "8", "--concurrency", "2",
                 "--compose", "--sample", "2")  # fmt: skip
    assert "2 target invocations" in out and "the 2 of 4 targets swept, not the round" in out
    assert "MODELLED, the whole round of 4 targets" in out and "target <= 900 s" not in out


def test_org_round_bench_runs_sandboxes_at_once_and_measures_the_rounds_wall() -> None:
    """--parallel: every target swept by sandboxes running at once, the round's wall measured (not composed) and
    labelled an upper bound; the DynamoDB items each target read are reported by read."""
    out = _bench("bench.org_round", "--accounts", "2", "--regions", "2", "--instances", "8", "--concurrency", "2",
                 "--compose", "--parallel", "--rounds", "2")  # fmt: skip
    first, second = out.split("ROUND 2 on the same ledger and warm sandboxes, measured")
    assert "4 target invocations" in first and "0 item failures, 4 account-regions swept, 8 instances" in first
    assert "ROUND, MEASURED with 2 sandboxes running at once" in first and "an upper bound" in first
    assert "DynamoDB items read per target (first half / second half of the round)" in first
    assert "Query by-target idle-mark" in first and "Query by-kind" not in out  # a target reads its own partitions
    assert "4 target invocations (0 first in their sandbox)" in second and "every target swept" in second


def test_backtest_fleet_bench_reads_a_csv_through_a_pipe_with_the_files_decisions(tmp_path: Path) -> None:
    """The 10,000 x 30-day CSV is measured through a named pipe fed by zstd: at a small size the pipe and the file
    give the same decisions."""
    common = ("--instances", "30", "--days", "0.25", "--dir", str(tmp_path), "--csv-only")
    piped = _bench("bench.backtest_fleet", *common, "--pipe")
    plain = _bench("bench.backtest_fleet", *common)
    decisions = [line for line in (piped + plain).splitlines() if line.strip().startswith("decisions:")]
    assert len(decisions) == 2 and decisions[0] == decisions[1] and "'instances': 30" in decisions[0]
