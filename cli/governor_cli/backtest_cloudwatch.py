"""``governor backtest --from-cloudwatch``: reading the fleet's last days into a file the backtest replays.

The GPU instances (by tag or id) are listed with one paginated ``DescribeInstances``; their metrics are read from
CloudWatch as the sweep reads them (``governor_cli.history``: batched ``GetMetricData`` at the call's limits, in
time order, progress on stderr) into a Parquet file (kept with ``--save``), which the same replay as ``--metrics``
decides on, knowing each instance's type (its GPU model's idle draw, its GPU count and price) and tags (its team,
tag exemptions). Prints what would have been warned, stopped and saved, per team.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from governor.domain.fleet import Instance, ownership
from governor.idle.domain import fetched_signals, required_signals
from governor.policy import Policy
from governor_cli.history import RETENTION_DAYS, CloudWatchHistory, cost_estimate, plan

STATES = ("pending", "running", "stopping", "stopped", "shutting-down")


def _usage(message: str) -> Exception:
    from governor_cli.main import UsageError

    return UsageError(message)


def _tags(pairs: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise _usage(f"--tag {pair!r}: use KEY=VALUE, e.g. --tag team=vision")
        found[key.strip()] = value.strip()
    return found


def fleet_instances(ec2: Any, policy: Policy, tags: dict[str, str], ids: list[str]) -> list[Instance]:
    """The GPU instances to replay: by id, or every GPU instance not terminated, narrowed by the tags."""
    from governor.adapters.ec2 import Ec2Reader

    reader = Ec2Reader(ec2=ec2)
    found = reader.instances(ids) if ids else reader.gpu_instances(policy.fleet, STATES)
    return [i for i in found if policy.fleet.is_gpu_type(i.type) and all(i.tags.get(k) == v for k, v in tags.items())]


def per_team(data: dict[str, Any], inventory: dict[str, Instance], policy: Policy) -> dict[str, dict[str, Any]]:
    """Warnings, stops and what they would have saved, per team: GPU-hours (instance-hours x the type's GPUs)
    and dollars at the type's on-demand price (``pricing.prices``)."""
    teams: dict[str, dict[str, Any]] = {}
    prices = policy.pricing.prices
    for instance_id, record in data["instances"].items():
        instance = inventory[instance_id]
        team = ownership(instance.tags, policy.fleet).team
        row = teams.setdefault(
            team, {"instances": 0, "warned": 0, "stopped": 0, "gpu_hours_saved": 0.0, "usd_saved": 0.0, "unpriced": 0}
        )
        row["instances"] += 1
        kinds = [a["type"] for a in record["actions"]]
        row["warned"] += 1 if "warn" in kinds else 0
        row["stopped"] += 1 if ("stop" in kinds or "terminate" in kinds) else 0
        hours = record["gpu_hours_reclaimed"]  # instance-hours: the replay counts one GPU an instance
        price = prices.get(instance.type)
        row["gpu_hours_saved"] += hours * (price.gpus if price else 1)
        if price is None and hours:
            row["unpriced"] += 1
        row["usd_saved"] += hours * (price.on_demand if price else 0.0)
    for row in teams.values():
        row["gpu_hours_saved"] = round(row["gpu_hours_saved"], 2)
        row["usd_saved"] = round(row["usd_saved"], 2)
    return dict(sorted(teams.items()))


@contextmanager
def history_file(
    args: argparse.Namespace, policy: Policy
) -> Iterator[tuple[Path, dict[str, Instance], dict[str, Any]]]:
    """Read the fleet's history into a Parquet file (``--save``, else a temporary one) and yield it with the EC2
    inventory and what the read cost (calls, datapoints, samples); the caller replays it."""
    from governor.adapters.aws import client
    from governor_cli.aws_access import failure, is_aws_error, resolve_region
    from governor_cli.sim import parquet

    if not 0 < args.days <= RETENTION_DAYS:
        raise _usage(f"--days {args.days:g}: CloudWatch keeps one-minute data for {RETENTION_DAYS} days; use 1 to 15")
    if policy.idle.network_bytes_threshold is not None:
        raise _usage("idle.network_bytes_threshold is set: a backtest does not replay network traffic; unset it")
    tags = _tags(args.tag)
    end = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    start = end - dt.timedelta(days=args.days)
    region = resolve_region(args.region)
    try:
        instances = fleet_instances(client("ec2", region), policy, tags, list(args.instance_ids))
    except Exception as error:  # botocore's errors: no credentials, access denied
        if is_aws_error(error):
            raise failure(error, "listing the GPU instances") from None
        raise _usage(f"cannot list the instances ({error.__class__.__name__}: {str(error)[:200]})") from None
    if not instances:
        what = ", ".join([*(f"{k}={v}" for k, v in tags.items()), *args.instance_ids]) or "any filter"
        raise _usage(f"no GPU instance matches {what} in {region}")
    signals = [s for s in fetched_signals(policy.idle) if s in parquet_signals()]
    missing = [s for s in required_signals(policy.idle) if s not in signals]
    if missing:
        raise _usage(f"the backtest cannot read {', '.join(missing)}")
    slices, queries, calls = plan(len(instances), signals, start, end)
    print(
        f"reading {args.days:g} days of {', '.join(signals)} for {len(instances)} instances: {calls} GetMetricData "
        f"calls ({queries} queries x {slices} slices; about ${cost_estimate(len(instances), signals, start, end):.2f})",
        file=sys.stderr,
    )

    def progress(done: int, total: int) -> None:
        if done == total or done % 25 == 0:
            print(f"GetMetricData {done}/{total}", file=sys.stderr)

    unit = policy.idle.gpu_memory_unit
    history = CloudWatchHistory(client("cloudwatch", region), memory_unit=unit, progress=progress)
    inventory = {i.id: i for i in instances}
    with tempfile.TemporaryDirectory(prefix="governor-history-") as scratch:
        path = Path(args.save) if args.save else Path(scratch) / "history.parquet"
        try:
            rows = parquet.write(path, history.groups(sorted(inventory), signals, start, end))
        except OSError as error:
            raise _usage(f"{path}: cannot write ({error.__class__.__name__})") from None
        except Exception as error:  # botocore's errors
            if is_aws_error(error):
                raise failure(error, "reading the metrics") from None
            raise _usage(f"cannot read the metrics ({error.__class__.__name__}: {str(error)[:200]})") from None
        print(f"{rows} samples in {history.calls} calls", file=sys.stderr)
        if not rows:
            raise _usage(f"no metrics in CloudWatch for these {len(instances)} instances over {args.days:g} days")
        yield path, inventory, {"calls": history.calls, "datapoints": history.datapoints, "samples": rows}


def render_teams(teams: dict[str, dict[str, Any]]) -> str:
    """One line per team; team names are tag values, so they go through the terminal's one escape."""
    from governor.domain.escape import terminal_text

    lines = ["", "per team (GPU-hours and dollars the stops would have saved, at on-demand prices):"]
    for name, row in teams.items():
        team = terminal_text(name)
        lines.append(
            f"  {team:20} {row['instances']:5} instances  {row['warned']:4} warned  {row['stopped']:4} stopped  "
            f"{row['gpu_hours_saved']:10.2f} GPU-h  ${row['usd_saved']:,.2f}"
            + (f"  ({row['unpriced']} without a price)" if row["unpriced"] else "")
        )
    return "\n".join(lines)


def parquet_signals() -> tuple[str, ...]:
    from governor_cli.sim.loaded import LOADED

    return LOADED
