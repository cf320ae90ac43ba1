"""Idle sweep cost side by side: the governor's sweep and Cloud Custodian's ``metrics`` policy on the same fleet.

For each fleet size a fresh local emulator (``moto.server.ThreadedMotoServer(port=0)`` in its own process, so
the governor's process CPU is the governor's and its clients' alone and the emulator does not share its interpreter
lock, as it never shared Custodian's) gets that many GPU instances
(types from the synthetic workload) and, for fleets up to ``--full-data`` instances, two hours of minute samples of
``nvidia_smi_utilization_gpu`` and ``nvidia_smi_memory_used`` (CWAgent, dimension InstanceId) from the workload
generator. Then, against the same emulator, alternately:

* the governor: ``governor.idle.sweep_run.run_sweep`` (report-only default policy, launch grace 0) with the real
  adapters (``Ec2Reader(wildcard_type_filter=False)``, ``CloudWatchMetrics``) on clients with the governor's retry
  settings and the CloudWatch client's own parsers (``governor.adapters.cloudwatch_parsing.build_client``) but a
  600 s read timeout (moto's GetMetricData walks the stored datapoints once per query and per
  period, which can pass the production 15 s), API calls counted by wrapping botocore's ``_make_api_call``; ledger and findings in memory (they are not EC2 or CloudWatch calls);
* Cloud Custodian 0.9.53 in its own virtual environment: ``bench/c7n_runner.py`` (a ``metrics`` filter on
  GPU utilisation, one hour periods, two hours), which counts its calls the same way in its process.

Wall time is each side's in-process time for one sweep (no interpreter start), a median over ``--runs``; CPU is
each side's process CPU (user + system) over the same sweep, per instance.
moto answers every CloudWatch query by scanning every stored datapoint (GetMetricData: once per query and per period),
which times the emulator, not the tools: a 100-instance sweep passes botocore's 15 s read timeout. The bench therefore
hands moto's own lookups only the datapoints of the queried metric (an index by namespace, name and dimension), and
fills a GetMetricData query's periods in one pass over them with moto's own aggregation (``Statistics``), for both
tools alike; the answers are moto's (``tests/unit/test_bench_emulator.py``). The datapoints are seeded inside the
emulator's process, through moto's own ``put_metric_data`` (what its PutMetricData handler calls; the same stored
datapoints, ``tests/unit/test_bench_emulator.py``), not through 2,200 PutMetricData requests for 10,000 instances;
seeding is not measured. Above ``--full-data`` instances the fleet is created without datapoints; neither tool's call
count depends on the datapoints, so the counts stay exact, and the table says which rows have none.

The governor's sweep reads CloudWatch in two phases (``governor.idle.window_statistics``): window statistics for
every instance, minute points for those they do not prove plainly busy; its CloudWatch call count is both phases'.

    .venv/bin/python -m bench.idle_vs_custodian [--sizes 100 1000 10000] [--runs 3] [--full-data 10000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from botocore.config import Config

from bench.common import C7N_PYTHON, ROOT, Figure, median, ratio
from governor_cli.testing import events

REGION = "us-east-1"
WINDOW_MINUTES = 120
IDLE_OUTCOMES = ("idle", "warned", "checkpoint", "acted", "held", "reported")
AGENT_METRICS = {"nvidia_smi_utilization_gpu": "gpu_utilization", "nvidia_smi_memory_used": "gpu_memory_used"}


@dataclass
class SideResult:
    """One tool's sweeps over one fleet: calls per ``service:Operation`` (same each run), matches, wall per run."""

    calls: dict[str, int] = field(default_factory=dict)
    matched: int | None = None
    outcomes: dict[str, int] = field(default_factory=dict)
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    def service_calls(self, service: str) -> int:
        return sum(n for key, n in self.calls.items() if key.split(":")[0] == service)


@dataclass
class SizeResult:
    size: int
    with_data: bool
    datapoints: int
    seed_seconds: float
    governor: SideResult
    custodian: SideResult


@dataclass
class Emulator:
    """The emulator's process: its endpoint, and its stdin/stdout, over which it seeds datapoints in its own process."""

    endpoint: str
    process: subprocess.Popen[str]

    def put_workload(self, start: dt.datetime, ids: list[str]) -> int:
        """Have the emulator put the generated workload's samples (``ids[k]``: the k-th synthetic instance's EC2 id)
        straight into moto's CloudWatch backend, as PutMetricData would store them; returns the datapoints put."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"start": start.timestamp(), "ids": ids}) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        return int(json.loads(answer)["points"])


@contextmanager
def emulator() -> Iterator[Emulator]:
    """A fresh moto server in its own process (``--serve``), with the environment pointing every client at it.

    Out of process, so the governor's process CPU is the governor's and its AWS clients' alone, and the emulator does
    not share the governor's interpreter lock (Custodian's process never shared it either).
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("lambdas", "cli", "."))}
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.idle_vs_custodian", "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert server.stdout is not None and server.stdin is not None
    endpoint = server.stdout.readline().strip()
    if not endpoint.startswith("http://"):
        server.kill()
        raise RuntimeError(f"the emulator did not start: {endpoint!r}")
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }
    )
    try:
        yield Emulator(endpoint, server)
    finally:
        server.stdin.close()  # the server stops when its stdin closes
        server.wait(timeout=60)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def serve() -> None:
    """``--serve``: moto's server on a free loopback port with the indexed CloudWatch lookups; prints its endpoint,
    then seeds each workload asked on stdin (one JSON line each, answered with one) until stdin closes."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with indexed_cloudwatch():
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        print(f"http://{host}:{port}", flush=True)
        for line in sys.stdin:
            asked = json.loads(line)
            start = dt.datetime.fromtimestamp(asked["start"], dt.UTC)
            print(json.dumps({"points": put_workload(start, asked["ids"])}), flush=True)
        server.stop()


def workload_datapoints(start: dt.datetime, ids: list[str]) -> Iterator[list[dict[str, Any]]]:
    """The generated workload's agent samples as PutMetricData's ``MetricData``, one list per instance (``ids[k]``:
    the k-th synthetic instance's EC2 id)."""
    from governor_cli.sim.workload import generate

    workload = generate(len(ids), hours=WINDOW_MINUTES / 60, seed=11, start=start)
    for instance_id, synthetic in zip(ids, workload.instances, strict=True):
        series = synthetic.series()
        dimensions = [{"Name": "InstanceId", "Value": instance_id}]
        yield [
            {
                "MetricName": name,
                "Dimensions": dimensions,
                "Timestamp": dt.datetime.fromtimestamp(epoch, dt.UTC),
                "Value": value,
            }
            for name, signal in AGENT_METRICS.items()
            for epoch, value in zip(series[signal].times, series[signal].values, strict=True)
        ]


def put_workload(start: dt.datetime, ids: list[str]) -> int:
    """In the emulator's process: the workload's samples put into moto's CloudWatch backend through its own
    ``put_metric_data`` (the call its PutMetricData handler makes; naive UTC timestamps, as that handler stores them),
    without a request per 1,000 datapoints. Seeding is not measured; 10,000 instances' 2.2 million datapoints take
    the HTTP path many minutes."""
    from moto.backends import get_backend
    from moto.core import DEFAULT_ACCOUNT_ID

    backend = get_backend("cloudwatch")[DEFAULT_ACCOUNT_ID][REGION]
    points = 0
    for data in workload_datapoints(start, ids):
        for datum in data:
            datum["Timestamp"] = datum["Timestamp"].replace(tzinfo=None)
        backend.put_metric_data("CWAgent", data)
        points += len(data)
    return points


@contextmanager
def indexed_cloudwatch() -> Iterator[None]:
    """Let moto's GetMetricStatistics/GetMetricData scan only the queried metric's datapoints (same results)."""
    from moto.cloudwatch.models import CloudWatchBackend

    lock = threading.RLock()
    put, statistics, data = (
        CloudWatchBackend.put_metric_data,
        CloudWatchBackend.get_metric_statistics,
        CloudWatchBackend.get_metric_data,
    )

    def candidates(backend: Any, namespace: str, name: str, dimension: dict[str, str]) -> list[Any]:
        index = backend.__dict__.get("_bench_index")
        if index is None:
            index = {}
            for datum in backend.get_all_metrics():
                for d in datum.dimensions:
                    index.setdefault((datum.namespace, datum.name, d.name, d.value), []).append(datum)
            backend.__dict__["_bench_index"] = index
        found: list[Any] = index.get((namespace, name, dimension["Name"], dimension.get("Value")), [])
        return found

    def narrowed(backend: Any, points: list[Any], call: Any) -> Any:
        backend.get_all_metrics = lambda: points  # the instance attribute shadows the method for this call only
        try:
            return call()
        finally:
            del backend.get_all_metrics

    def put_metric_data(self: Any, namespace: str, metric_data: list[dict[str, Any]]) -> None:
        with lock:
            self.__dict__.pop("_bench_index", None)
            put(self, namespace, metric_data)

    def get_metric_statistics(
        self: Any,
        namespace: str,
        metric_name: str,
        start_time: dt.datetime,
        end_time: dt.datetime,
        period: int,
        stats: list[str],
        dimensions: list[dict[str, str]],
        unit: str | None = None,
    ) -> Any:
        def call() -> Any:
            return statistics(self, namespace, metric_name, start_time, end_time, period, stats, dimensions, unit)

        with lock:
            if not dimensions:
                return call()
            return narrowed(self, candidates(self, namespace, metric_name, dimensions[0]), call)

    def get_metric_data(
        self: Any,
        queries: list[dict[str, Any]],
        start_time: dt.datetime,
        end_time: dt.datetime,
        scan_by: str = "TimestampAscending",
    ) -> Any:
        with lock:
            if any(not q.get("MetricStat", {}).get("Metric", {}).get("Dimensions") for q in queries):
                return data(self, queries, start_time, end_time, scan_by)
            narrowed(self, [], lambda: data(self, [], start_time, end_time, scan_by))  # moto's checks of the range
            return [bucketed(self, q, start_time, end_time, scan_by) for q in queries if q.get("ReturnData", True)]

    def bucketed(self: Any, query: dict[str, Any], start: dt.datetime, end: dt.datetime, scan_by: str) -> Any:
        """moto's answer to one MetricStat query, its periods filled by one pass over the metric's datapoints
        (moto's loop scans them once per period): same filters, same aggregation (moto's ``Statistics``)."""
        from moto.cloudwatch.models import Dimension, Statistics

        start, end = start.replace(microsecond=0), end.replace(microsecond=0)
        stat, metric = query["MetricStat"], query["MetricStat"]["Metric"]
        dimensions = sorted(Dimension(name=d["Name"], value=d["Value"]) for d in metric["Dimensions"])
        period, unit = int(stat["Period"]), stat.get("Unit")
        buckets: dict[int, list[Any]] = {}
        for md in candidates(self, metric["Namespace"], metric["MetricName"], metric["Dimensions"][0]):
            if start <= md.timestamp < end and sorted(md.dimensions) == dimensions and (not unit or md.unit == unit):
                buckets.setdefault(int((md.timestamp - start).total_seconds()) // period, []).append(md)
        values, stamps = [], []
        for k in sorted(buckets):
            stats = Statistics([stat["Stat"]], start + dt.timedelta(seconds=k * period))
            stats.metric_data = buckets[k]
            values.append(stats.get_statistics_for_type(stat["Stat"]))
            stamps.append(stats.timestamp)
        if scan_by == "TimestampDescending":
            values.reverse()
            stamps.reverse()
        label = query.get("Label") or f"{metric['MetricName']} {stat['Stat']}"
        return {"id": query["Id"], "label": label, "values": values, "timestamps": stamps, "status_code": "Complete"}

    CloudWatchBackend.put_metric_data = put_metric_data  # type: ignore[method-assign]
    CloudWatchBackend.get_metric_statistics = get_metric_statistics  # type: ignore[method-assign]
    CloudWatchBackend.get_metric_data = get_metric_data  # type: ignore[method-assign]
    try:
        yield
    finally:
        CloudWatchBackend.put_metric_data = put  # type: ignore[method-assign]
        CloudWatchBackend.get_metric_statistics = statistics  # type: ignore[method-assign]
        CloudWatchBackend.get_metric_data = data  # type: ignore[method-assign]


def seed(size: int, with_data: bool, emulated: Emulator) -> tuple[dt.datetime, int]:
    """Launch ``size`` GPU instances (workload types), then, if asked, have the emulator put their GPU samples of the
    two hours before ``now`` in its own process (:meth:`Emulator.put_workload`); ``now`` is the whole minute after the
    last launch (10,000 launches take minutes), so no instance is launched after the samples say it ran. Returns
    ``now`` and the datapoints put."""
    import boto3

    from governor_cli.sim.workload import generate

    workload = generate(size, hours=WINDOW_MINUTES / 60, seed=11)  # the types (and their order); times come later
    ec2 = boto3.client("ec2", region_name=REGION)
    image = "ami-12c6146b"  # moto accepts any image id
    by_type: dict[str, list[Any]] = {}
    for synthetic in workload.instances:
        by_type.setdefault(synthetic.instance_type, []).append(synthetic)
    pairs: list[tuple[str, Any]] = []
    for instance_type, group in by_type.items():
        for first in range(0, len(group), 1000):
            chunk = group[first : first + 1000]
            launched = ec2.run_instances(
                ImageId=image, InstanceType=instance_type, MinCount=len(chunk), MaxCount=len(chunk)
            )["Instances"]
            pairs.extend(zip((i["InstanceId"] for i in launched), chunk, strict=True))
    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    if not with_data:
        return now, 0
    by_synthetic = {synthetic.id: instance_id for instance_id, synthetic in pairs}
    start = now - dt.timedelta(minutes=WINDOW_MINUTES)
    return now, emulated.put_workload(start, [by_synthetic[i.id] for i in workload.instances])


@contextmanager
def counting_calls() -> Iterator[Counter[str]]:
    """Count every botocore API call made in this process as ``service:Operation`` while the block runs."""
    import botocore.client

    calls: Counter[str] = Counter()
    original = botocore.client.BaseClient._make_api_call

    def counting(self: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
        calls[f"{self.meta.service_model.service_name}:{operation_name}"] += 1
        return original(self, operation_name, api_params)

    botocore.client.BaseClient._make_api_call = counting
    try:
        yield calls
    finally:
        botocore.client.BaseClient._make_api_call = original


def _client(service: str) -> Any:
    """The governor's clients as ``governor.adapters.aws`` builds them (retries, the CloudWatch client's own parsers),
    but a read timeout the emulator's slow CloudWatch scans fit in."""
    import boto3

    from governor.adapters.aws import RETRIES
    from governor.adapters.cloudwatch_parsing import build_client

    config = RETRIES.merge(Config(read_timeout=600))
    return build_client(boto3.session.Session(), service, region_name=REGION, config=config)


def governor_sweep(now: dt.datetime) -> tuple[dict[str, int], int, float, float, dict[str, int]]:
    """One first sweep (empty ledger), as the scheduled Lambda would run it: calls, idle verdicts, wall seconds, CPU
    seconds of this process (the governor and its AWS clients; the emulator runs in its own), outcomes.

    The function's clock reads ``now`` (the minute after the seeded samples end), as the scheduled event does: on the
    wall clock, a 10,000-instance fleet's samples are minutes old by its third run, and the sweep rightly calls an
    instance whose newest sample is older than ``max_sample_age_minutes`` unmonitored, never idle."""
    from governor.adapters.ec2 import Ec2Actions, Ec2Reader
    from governor.adapters.ssm import SsmCommands
    from governor.events.envelopes import GovernorEvent
    from governor.idle.metrics import CloudWatchMetrics
    from governor.idle.ports import Adapters
    from governor.idle.sweep_run import run_sweep
    from governor.policy import parse_policy
    from governor.runtime import Runtime
    from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink

    policy = parse_policy({"idle": {"launch_grace_minutes": 0}})
    runtime = Runtime(policy, MemoryLedger(), MemorySink(), MemoryDeadLetters(), region=REGION)
    aws = Adapters(
        Ec2Reader(ec2=_client("ec2"), wildcard_type_filter=False),
        Ec2Actions(ec2=_client("ec2")),
        CloudWatchMetrics(cloudwatch=_client("cloudwatch")),
        SsmCommands(ssm=_client("ssm")),
        clock=lambda: now,
    )
    event = GovernorEvent.model_validate(
        events.scheduled(event_id=f"bench-sweep-{time.monotonic_ns()}", time=now, region=REGION)
    )
    with counting_calls() as calls:
        began, cpu = time.perf_counter(), time.process_time()
        result = run_sweep(event, runtime, aws)
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    flagged = sum(n for outcome, n in result["outcomes"].items() if outcome in IDLE_OUTCOMES)
    if result["instances"] != sum(result["outcomes"].values()):
        raise RuntimeError(f"sweep saw {result['instances']} instances but decided {result['outcomes']}")
    return dict(calls), flagged, seconds, cpu, dict(result["outcomes"])


def custodian_sweep(endpoint: str) -> tuple[dict[str, int], int | None, float, float]:
    """One ``custodian run`` of the idle policy in the c7n virtual environment: calls, matches, wall and CPU seconds."""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }
    with tempfile.TemporaryDirectory(prefix="c7n-bench-") as out:
        done = subprocess.run(
            [str(C7N_PYTHON), str(ROOT / "bench" / "c7n_runner.py"), endpoint, out],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return dict(figures["calls"]), figures["matched"], float(figures["wall_seconds"]), float(figures["cpu_seconds"])


def measure_size(size: int, runs: int, full_data: int) -> SizeResult:
    """Seed one fleet, then alternate governor and Custodian sweeps ``runs`` times on it."""
    import governor.idle.handler  # the sandbox's init, as Lambda runs it before the first invocation
    from governor.observability import logger

    logger.setLevel("ERROR")
    with emulator() as emulated:
        with_data = size <= full_data
        began = time.perf_counter()
        now, points = seed(size, with_data, emulated)
        seeded = time.perf_counter() - began
        # Seeding ran in this process and is not the function's work: its objects are collected and the rest frozen,
        # so the sweeps find the heap a sandbox has after its init (the handler freezes it there: governor.runtime).
        gc.collect()
        gc.freeze()
        governor, custodian = SideResult(), SideResult()
        for _ in range(runs):
            calls, flagged, seconds, cpu, outcomes = governor_sweep(now + dt.timedelta(minutes=1))
            if sum(outcomes.values()) != size:
                raise RuntimeError(f"the emulated fleet has {sum(outcomes.values())} instances, not {size}")
            governor.calls, governor.matched, governor.outcomes = calls, flagged, outcomes
            governor.walls.append(seconds)
            governor.cpus.append(cpu)
            calls, matched, seconds, cpu = custodian_sweep(emulated.endpoint)
            custodian.calls, custodian.matched = calls, matched
            custodian.walls.append(seconds)
            custodian.cpus.append(cpu)
    return SizeResult(size, with_data, points, seeded, governor, custodian)


def figures(results: list[SizeResult], command: str, runs: int) -> list[Figure]:
    """The table rows: per size, calls per service and wall for each tool, and the ratios of the same run."""
    rows: list[Figure] = []
    section = "1. Idle sweep cost vs Cloud Custodian"
    for r in results:
        g, c = r.governor, r.custodian
        data = (
            f"{r.datapoints:,} datapoints stored"
            if r.with_data
            else "no datapoints stored (moto scans every datapoint per query); calls exact, wall = listing + round trips"
        )
        label = f"{r.size:,} instances"
        g_cw, c_cw = g.service_calls("cloudwatch"), c.service_calls("cloudwatch")
        g_ec2, c_ec2 = g.service_calls("ec2"), c.service_calls("ec2")
        g_wall, c_wall = median(g.walls), median(c.walls)
        g_cpu, c_cpu = median(g.cpus) * 1000 / r.size, median(c.cpus) * 1000 / r.size
        rows += [
            Figure(section, f"{label}: CloudWatch API calls, governor / Custodian", f"{g_cw:,} / {c_cw:,}", command),
            Figure(section, f"{label}: CloudWatch calls ratio (Custodian / governor)", ratio(c_cw, g_cw), command),
            Figure(section, f"{label}: EC2 API calls, governor / Custodian", f"{g_ec2:,} / {c_ec2:,}", command),
            Figure(
                section,
                f"{label}: wall per sweep, governor / Custodian (median of {len(g.walls)})",
                f"{g_wall:.2f} s / {c_wall:.2f} s",
                command,
                data,
            ),
            Figure(section, f"{label}: wall ratio (Custodian / governor)", ratio(c_wall, g_wall), command, data),
            Figure(
                section,
                f"{label}: CPU per instance per sweep, governor / Custodian (median of {len(g.cpus)})",
                f"{g_cpu:.2f} ms / {c_cpu:.2f} ms",
                command,
                "each tool's process CPU (user + system) during its sweep, the emulator in its own process; "
                "target <= 1 ms for the governor",
            ),
            Figure(
                section,
                f"{label}: flagged idle, governor / Custodian",
                f"{g.matched} / {c.matched}",
                command,
                "governor: instances judged idle (every signal idle for the window); Custodian: resources its filter matched",
            ),
        ]
    return rows


def describe(r: SizeResult) -> str:
    g, c = r.governor, r.custodian
    return (
        f"{r.size:>6} instances ({'with' if r.with_data else 'without'} data, {r.datapoints:,} points, seeded in "
        f"{r.seed_seconds:.0f}s)\n"
        f"   governor : {json.dumps(g.calls, sort_keys=True)}; flagged {g.matched} {g.outcomes}; wall "
        + ", ".join(f"{w:.2f}" for w in g.walls)
        + "; CPU "
        + ", ".join(f"{w:.2f}" for w in g.cpus)
        + "\n"
        f"   custodian: {json.dumps(c.calls, sort_keys=True)}; matched {c.matched}; wall "
        + ", ".join(f"{w:.2f}" for w in c.walls)
        + "; CPU "
        + ", ".join(f"{w:.2f}" for w in c.cpus)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--full-data", type=int, default=10000, help="largest fleet seeded with datapoints")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the emulator's own process
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    if not C7N_PYTHON.exists():
        raise SystemExit(f"{C7N_PYTHON} missing: run `make bench/.venv-c7n/.installed` first")
    for size in args.sizes:
        print(describe(measure_size(size, args.runs, args.full_data)), flush=True)


if __name__ == "__main__":
    main()
