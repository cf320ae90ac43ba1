"""``governor backtest --metrics FILE.csv``: replay the idle policy over exported metrics before enabling it.

The same decision code as the sweep Lambda runs every ``--interval`` over the file, with the warning period, the rate
limit and the circuit breaker applied, and reports each instance's warnings and actions plus the GPU-hours they would
have reclaimed.
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import itertools
import json
import re
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from governor.domain.fleet import Instance
from governor.idle.domain import MEMORY_UNITS, Series
from governor.idle.kubernetes.promql import attribute
from governor.policy import Policy, PolicyError, resolve_policy
from governor_cli.sim import container_insights_export, prometheus_export
from governor_cli.sim.metrics_file import HEADER, KNOWN_METRICS, MetricsFileError, parse_metrics, parse_timestamp
from governor_cli.sim.replay import Replay, ReplayedInstance, replay

__all__ = ["HEADER", "KNOWN_METRICS", "MetricsFileError", "parse_metrics", "parse_timestamp"]

_INTERVAL = re.compile(r"^\s*(\d+)\s*([smh]?)\s*$")
MAX_INTERVAL_SECONDS = 24 * 3600


def register(subparsers: Any) -> None:
    from governor_cli.flags import add_policy, add_region

    parser = subparsers.add_parser("backtest", help="replay the idle policy over exported GPU metrics")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--metrics",
        help="CSV with the header timestamp,instance_id,metric,value, or Parquet with those columns, or a Prometheus "
        "export of DCGM exporter series (range-query JSON, or text exposition with timestamps), or Container "
        "Insights performance log events (aws logs filter-log-events output, or JSON Lines)",
    )
    source.add_argument(
        "--from-cloudwatch",
        action="store_true",
        help="read the fleet's own metrics from CloudWatch (one-minute data is kept 15 days)",
    )
    add_region(parser)
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--from-cloudwatch: only instances with this tag",
    )
    parser.add_argument("--instance-ids", nargs="+", default=[], help="--from-cloudwatch: only these instances")
    parser.add_argument("--days", type=float, default=14, help="--from-cloudwatch: how far back, up to 15 (default 14)")
    parser.add_argument("--save", help="--from-cloudwatch: also keep the metrics read as this Parquet file")
    parser.add_argument(
        "--instances",
        help="--metrics: the fleet as `aws ec2 describe-instances` prints it (JSON), so the replay knows each "
        "instance's type, tags and purchase model (a Capacity Block or reservation is reported, never counted as "
        "reclaimed); --from-cloudwatch reads it from EC2 itself",
    )
    add_policy(parser)
    parser.add_argument("--interval", default="15m", help="sweep interval, e.g. 15m, 1h, 900s (default: 15m)")
    parser.add_argument(
        "--memory-unit",
        choices=sorted(MEMORY_UNITS),
        default="MB",
        help="unit of the gpu_memory_used values (default: MB, as the CloudWatch agent publishes them)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(run=run)


def parse_interval(text: str) -> dt.timedelta:
    """``15m``, ``1h``, ``900s`` or a bare number of minutes; from one minute to one day (EventBridge's range)."""
    match = _INTERVAL.match(text)
    if not match or len(match.group(1)) > 6:
        raise ValueError(f"--interval {text!r}: use a whole number with s, m or h, from 1m to 24h, e.g. 15m")
    amount = int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "": 60}[match.group(2)]
    if amount < 60:
        raise ValueError(f"--interval {text!r}: the sweep cannot run more often than once a minute")
    if amount > MAX_INTERVAL_SECONDS:
        raise ValueError(f"--interval {text!r}: at most 24h; a sweep rarer than daily cannot keep an idle window")
    return dt.timedelta(seconds=amount)


def stretches(signals: dict[str, dict[str, Series]], gap: dt.timedelta) -> list[tuple[float, float]]:
    """The spans of the file that hold data: sample minutes closer than ``gap`` to the next one share a stretch.

    A sweep between stretches would see no sample in its window and decide nothing (missing data never reads as
    idle), so the replay skips those sweeps and its time grows with the samples, not with the span between them.
    """
    minutes = sorted({t for series in signals.values() for s in series.values() for t in s.times})
    found: list[tuple[float, float]] = []
    first = previous = minutes[0]
    for minute in minutes[1:]:
        if minute - previous > gap.total_seconds():
            found.append((first, previous))
            first = minute
        previous = minute
    found.append((first, previous))
    return found


def _slice(signals: dict[str, dict[str, Series]], low: float, high: float) -> dict[str, dict[str, Series]]:
    part: dict[str, dict[str, Series]] = {}
    for instance_id, series in signals.items():
        for metric, s in series.items():
            a, b = bisect.bisect_left(s.times, low), bisect.bisect_right(s.times, high)
            if a < b:
                part.setdefault(instance_id, {})[metric] = Series(s.times[a:b], s.values[a:b])
    return part


def replay_stretches(
    signals: dict[str, dict[str, Series]], policy: Policy, interval: dt.timedelta
) -> tuple[Replay, list[tuple[dt.datetime, dt.datetime]]]:
    """Replay each stretch of data on its own, then add them up; returns the total and the gaps skipped.

    Launch grace counts from an instance's first sample in the whole file; an instance stopped in one stretch and
    back in a later one was started again. GPU-hours reclaimed by a stop count to the end of its stretch.
    """
    start, end = bounds(signals)
    gap = dt.timedelta(minutes=policy.idle.window_minutes) + interval
    spans = stretches(signals, gap)
    if len(spans) == 1:
        return replay(signals, policy, start=start, end=end, interval=interval), []
    launches = {
        instance_id: dt.datetime.fromtimestamp(min(s.times[0] for s in series.values()), dt.UTC)
        for instance_id, series in signals.items()
    }
    total = Replay(start=start, end=end, interval=interval)
    for low, high in spans:
        part = replay(
            _slice(signals, low, high),
            policy,
            start=dt.datetime.fromtimestamp(low, dt.UTC),
            end=dt.datetime.fromtimestamp(high + 60, dt.UTC),
            interval=interval,
            launch_times=launches,
        )
        total.sweeps += part.sweeps
        total.held_back_sweeps.extend(part.held_back_sweeps)
        for verdict, count in part.verdicts.items():
            total.verdicts[verdict] = total.verdicts.get(verdict, 0) + count
        for instance_id, record in part.instances.items():
            mine = total.instances.setdefault(instance_id, ReplayedInstance())
            mine.actions.extend(record.actions)
            mine.gpu_hours_reclaimed = round(mine.gpu_hours_reclaimed + record.gpu_hours_reclaimed, 4)
            mine.stopped_at = record.stopped_at or mine.stopped_at
    gaps = [
        (dt.datetime.fromtimestamp(a[1] + 60, dt.UTC), dt.datetime.fromtimestamp(b[0], dt.UTC))
        for a, b in itertools.pairwise(spans)
    ]
    return total, gaps


def replay_file(
    path: Path,
    policy: Policy,
    interval: dt.timedelta,
    memory_unit: str = "MB",
    inventory: Mapping[str, Instance] | None = None,
) -> tuple[Replay, list[tuple[dt.datetime, dt.datetime]]]:
    """The columnar replay of a metrics file (see :mod:`governor_cli.sim.columnar`): the decisions of
    :func:`replay_stretches`, with time growing with the samples and memory with the fleet and the window.

    A file the columnar reader does not vouch for is read row by row instead, which raises
    :class:`MetricsFileError` naming the line for anything malformed. A pipe (``--metrics <(zstdcat x.csv.zst)``)
    can be read only once: it is read as CSV by the fast reader, and what that reader cannot vouch for is an error.
    """
    from governor_cli.sim import columnar, parquet

    with tempfile.TemporaryDirectory(prefix="governor-backtest-") as scratch:
        folder = Path(scratch)
        if is_pipe(path):
            return columnar.replay_columnar(read_pipe(path, memory_unit, folder), policy, interval, inventory)
        if not path.is_file():
            path.open(encoding="utf-8").close()  # the OSError a missing file or a folder raises
        if parquet.is_parquet(path):
            return columnar.replay_columnar(
                parquet.open_samples(path, memory_unit, folder), policy, interval, inventory
            )
        try:
            samples = columnar.load(path, memory_unit, folder)
        except columnar.Unsure:
            with path.open(encoding="utf-8-sig", newline="") as handle:  # -sig: spreadsheets start with a BOM
                signals = parse_metrics(handle, str(path), memory_unit)
            samples = columnar.from_signals(signals, folder)
        return columnar.replay_columnar(samples, policy, interval, inventory)


def is_pipe(path: Path) -> bool:
    """A named pipe or a character device (``<(command)``, ``/dev/stdin``): bytes that can be read only once."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def read_pipe(path: Path, memory_unit: str, folder: Path) -> Any:
    """A CSV read from a pipe in one pass; what the fast reader cannot vouch for is a :class:`MetricsFileError`
    (the careful reader would need the bytes a second time)."""
    from governor_cli.sim.columnar import LOADED
    from governor_cli.sim.metrics_file import Unsure
    from governor_cli.sim.spill import read_csv

    try:
        return read_csv(path, memory_unit, folder / "spill", LOADED)
    except Unsure as doubt:
        raise MetricsFileError(
            f"{path}: {doubt} (a pipe is read once, by the fast CSV reader; save it to a file to have it read "
            "line by line)"
        ) from None


def bounds(signals: dict[str, dict[str, Series]]) -> tuple[dt.datetime, dt.datetime]:
    """From the first sample's minute to the end of the last sample's minute."""
    times = [t for series in signals.values() for s in series.values() for t in (s.times[0], s.times[-1])]
    return dt.datetime.fromtimestamp(min(times), dt.UTC), dt.datetime.fromtimestamp(max(times) + 60, dt.UTC)


def _iso(value: dt.datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def to_json(result: Replay, policy: Policy) -> dict[str, Any]:
    """The issue's shape: per-instance actions and reclaimed GPU-hours, then the totals."""
    return {
        "instances": {
            instance_id: {
                "actions": [{"at": _iso(at), "type": kind} for at, kind in record.actions],
                "gpu_hours_reclaimed": round(record.gpu_hours_reclaimed, 2),
            }
            for instance_id, record in sorted(result.instances.items())
        },
        "summary": {
            "instances": len(result.instances),
            "start": _iso(result.start),
            "end": _iso(result.end),
            "interval_minutes": result.interval.total_seconds() / 60,
            "sweeps": result.sweeps,
            "warnings": result.count("warn"),
            "stops": result.count("stop"),
            "terminations": result.count("terminate"),
            "gpu_hours_reclaimed": round(result.gpu_hours_reclaimed, 2),
            "held_back_sweeps": [_iso(at) for at in result.held_back_sweeps],
            "breaker_trips": [_iso(at) for at in result.breaker_trips],
            "deferred_sweeps": result.deferred_sweeps,
            "verdicts": dict(sorted(result.verdicts.items())),
            "policy": {
                "window_minutes": policy.idle.window_minutes,
                "gpu_utilization_threshold": policy.idle.gpu_utilization_threshold,
                "memory_change_tolerance_mib": policy.idle.memory_change_tolerance_mib,
                "max_actions_per_sweep": policy.idle.max_actions_per_sweep,
                "max_fleet_percent": policy.idle.max_fleet_percent,
                "breaker_fleet_percent": policy.idle.breaker_fleet_percent,
                "cpu_utilization_threshold": policy.idle.cpu_utilization_threshold,
                "warning_minutes": policy.idle.warning_minutes,
                "enforce": policy.idle.enforce,
            },
        },
    }


def render_text(data: dict[str, Any], source: str) -> str:
    summary = data["summary"]
    rules = summary["policy"]
    lines = [
        f"backtest of {source}: {summary['instances']} instances, {summary['start']} .. {summary['end']}, "
        f"a sweep every {summary['interval_minutes']:g} min ({summary['sweeps']} sweeps)",
        f"policy: window {rules['window_minutes']} min, GPU < {rules['gpu_utilization_threshold']:g}%, memory "
        f"change <= {rules['memory_change_tolerance_mib']:g} MiB, warning {rules['warning_minutes']} min"
        + ("" if rules["enforce"] else " (report-only in the policy; replayed as if enforcing)"),
        "",
    ]
    acted = {k: v for k, v in data["instances"].items() if v["actions"]}
    for instance_id, record in acted.items():
        steps = ", ".join(f"{a['type']} {a['at']}" for a in record["actions"])
        hours = f"  {record['gpu_hours_reclaimed']:.2f} GPU-h" if record["gpu_hours_reclaimed"] else ""
        lines.append(f"  {instance_id}  {steps}{hours}")
    if not acted:
        lines.append("  no instance would have been warned or stopped")
    if data.get("namespaces"):
        lines += ["", "GPU-hours by namespace (the pods that held the GPUs):"]
        for row in data["namespaces"]:
            held = " (allocated but idle)" if row["allocated_but_idle"] else ""
            hours = f"{row['gpu_hours']:.2f} GPU-h, {row['idle_gpu_hours']:.2f} idle"
            lines.append(f"  {row['namespace'] or '(no pod)'}: {hours}{held}")
    verdicts = ", ".join(f"{k} {v}" for k, v in summary["verdicts"].items())
    lines += [
        "",
        f"verdicts over all sweeps: {verdicts}",
        *(
            [f"skipped {len(summary['gaps_skipped'])} stretch(es) without data, e.g. {gap['from']} .. {gap['to']}"]
            if (gap := next(iter(summary.get("gaps_skipped", [])), None))
            else []
        ),
        f"summary: {summary['warnings']} warnings, {summary['stops']} stops, {summary['terminations']} "
        f"terminations, {summary['deferred_sweeps']} sweeps deferred actions to the next (rate limit), "
        f"{len(summary['held_back_sweeps'])} sweeps held instances (circuit breaker, {len(summary['breaker_trips'])} "
        "trips); "
        f"{summary['gpu_hours_reclaimed']:.2f} GPU-hours reclaimed",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from governor_cli.main import UsageError

    try:
        policy = resolve_policy(args.policy)[0]
    except PolicyError as error:
        raise UsageError(str(error)) from None
    try:
        interval = parse_interval(args.interval)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.from_cloudwatch:
        return _from_cloudwatch(args, policy, interval)
    for option in ("region", "save", "instance_ids", "tag"):
        if getattr(args, option):
            raise UsageError(f"--{option.replace('_', '-')} goes with --from-cloudwatch, not --metrics")
    inventory = read_instances(Path(args.instances)) if args.instances else None
    path = Path(args.metrics)
    namespaces: list[dict[str, Any]] | None = None
    try:
        if path.is_file() and container_insights_export.is_container_insights_export(path):
            export = container_insights_export.read_export(path)
            result, gaps = replay_stretches(export.signals(), policy, interval)
            namespaces = container_insights_export.namespaces(export, policy.idle.gpu_utilization_threshold)
        elif path.is_file() and prometheus_export.is_prometheus_export(path):
            signals, readings = prometheus_export.read_export(path)
            result, gaps = replay_stretches(signals, policy, interval)
            namespaces = [
                {
                    "namespace": row.namespace,
                    "gpu_hours": row.gpu_hours,
                    "idle_gpu_hours": row.idle_gpu_hours,
                    "allocated_but_idle": row.allocated_but_idle,
                    "pods": list(row.pods),
                }
                for row in attribute(readings, policy.idle.gpu_utilization_threshold)
            ]
        else:
            result, gaps = replay_file(path, policy, interval, args.memory_unit, inventory)
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot read the metrics file ({error.__class__.__name__})") from None
    except MetricsFileError as error:
        raise UsageError(str(error)) from None
    data = to_json(result, policy)
    if namespaces is not None:
        data["namespaces"] = namespaces
    data["summary"]["gaps_skipped"] = [{"from": _iso(a), "to": _iso(b)} for a, b in gaps]
    print(json.dumps(data, indent=2) if args.json else render_text(data, str(path)))
    return 0


def read_instances(path: Path) -> dict[str, Instance]:
    """The instances of a DescribeInstances response as the AWS CLI prints it (``Reservations[].Instances[]``),
    read by the same mapping the sweep uses (``governor.adapters.ec2.to_instance``): lifecycle, reservation, tags."""
    from governor.adapters.ec2 import to_instance
    from governor_cli.main import UsageError

    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        raws = [raw for reservation in data["Reservations"] for raw in reservation["Instances"]]
        found = [to_instance(raw) for raw in raws]
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot read the instances file ({error.__class__.__name__})") from None
    except (ValueError, KeyError, TypeError) as error:
        raise UsageError(
            f"{path}: not a DescribeInstances response (Reservations[].Instances[]): {error.__class__.__name__}: "
            f"{error}"
        ) from None
    return {instance.id: instance for instance in found}


def _from_cloudwatch(args: argparse.Namespace, policy: Policy, interval: dt.timedelta) -> int:
    """``--from-cloudwatch``: the fleet's history read into Parquet, replayed knowing each instance, per team."""
    from governor_cli.backtest_cloudwatch import history_file, per_team, render_teams
    from governor_cli.main import UsageError

    with history_file(args, policy) as (path, inventory, read):
        try:
            result, gaps = replay_file(path, policy, interval, "MiB", inventory)
        except MetricsFileError as error:
            raise UsageError(str(error)) from None
    data = to_json(result, policy)
    data["summary"]["gaps_skipped"] = [{"from": _iso(a), "to": _iso(b)} for a, b in gaps]
    data["summary"]["cloudwatch"] = read
    data["teams"] = per_team(data, inventory, policy)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    source = f"CloudWatch ({args.region or 'configured region'}, last {args.days:g} days)"
    print(render_text(data, source) + render_teams(data["teams"]))
    return 0
