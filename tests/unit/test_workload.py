"""The synthetic workload: reproducible, and each kind shows the behaviour it exists to test."""

from __future__ import annotations

import io
import itertools
from collections import Counter

from governor.idle.domain import GPU_UTILIZATION
from governor_cli.sim.workload import KINDS, generate


def _csv(seed: int) -> str:
    out = io.StringIO()
    generate(10, hours=3, seed=seed).write_csv(out)
    return out.getvalue()


def test_same_seed_same_bytes_other_seed_other_data() -> None:
    assert _csv(3) == _csv(3)
    assert _csv(3) != _csv(4)


def test_mix_covers_every_kind_in_proportion() -> None:
    workload = generate(100, hours=1)
    counts = Counter(i.kind for i in workload.instances)
    assert set(counts) == set(KINDS) and sum(counts.values()) == 100
    assert counts["training"] == 35 and counts["unmonitored"] == 10
    assert len({i.id for i in workload.instances}) == 100


def test_inference_is_working_all_day_with_an_hourly_mean_under_five_percent() -> None:
    workload = generate(40, hours=24, mix={"inference": 1})
    for inst in workload.instances:
        util = [u for u in inst.gpu_utilization if u is not None]
        hours = [util[h * 60 : (h + 1) * 60] for h in range(24)]
        assert all(inst.working)
        assert sum(sum(h) / 60 < 5 for h in hours) >= 12  # mostly under the naive rule's bar
        gaps = [i for i, u in enumerate(util) if u >= 5]
        assert max(b - a for a, b in itertools.pairwise(gaps)) <= 61  # never 2 h without traffic


def test_unmonitored_instances_stop_reporting_but_keep_working() -> None:
    inst = generate(5, hours=24, mix={"unmonitored": 1}).instances[0]
    assert inst.gpu_utilization[-1] is None and inst.gpu_memory_used[-1] is None
    assert all(inst.working) and inst.cpu_utilization[-1] is not None
    assert len(inst.series()[GPU_UTILIZATION].times) < inst.minutes // 2 + 1


def test_truly_idle_and_abandoned_notebooks_are_not_working_and_quiet() -> None:
    workload = generate(10, hours=6, mix={"idle": 1, "notebook": 1})
    for inst in workload.instances:
        tail = inst.gpu_utilization[-120:]
        assert max(u for u in tail if u is not None) < 5
        assert not any(inst.working[-120:])
    notebook = next(i for i in workload.instances if i.kind == "notebook")
    # model still loaded: over 4 GiB, in MB as the CloudWatch agent publishes nvidia_smi_memory_used
    assert min(m for m in notebook.gpu_memory_used[-120:] if m is not None) > 4 * 1024


def test_csv_rows_have_the_backtest_header_and_epoch_option() -> None:
    out = io.StringIO()
    rows = generate(2, hours=1).write_csv(out, epoch=True)
    lines = out.getvalue().splitlines()
    assert lines[0] == "timestamp,instance_id,metric,value" and len(lines) == rows + 1
    assert lines[1].split(",")[0].isdigit()
