"""``governor explain EVENT.json``: what the governor would decide for one event, acting on nothing."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from governor.events.envelopes import InvalidEventError
from governor.policy import PolicyError, resolve_policy


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("explain", help="show what the governor would decide for one event")
    parser.add_argument(
        "event",
        nargs="?",
        help='an EventBridge event, a CloudTrail record or a whole CloudTrail file ({"Records": [...]}, as delivered '
        "(.json.gz) or not: one result per record; --json prints them as one JSON array, in the file's order), as "
        "JSON; - reads standard input",
    )
    parser.add_argument(
        "--instances",
        metavar="FILE",
        help="instead of an event: the idle sweep's decision on each instance of this `aws ec2 describe-instances` "
        "output, were its GPUs idle for the window (purchase model, reservation, HyperPod, restart risk); with "
        "--metrics: the nodes' tags, type and launch time",
    )
    parser.add_argument(
        "--reservations",
        help="with --instances: `aws ec2 describe-capacity-reservations` output (match criteria, a block's end)",
    )
    parser.add_argument(
        "--hyperpod-cluster",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="with --instances: a HyperPod cluster's `aws sagemaker list-cluster-nodes` output (repeatable)",
    )
    from governor_cli.flags import add_policy

    add_policy(parser)
    nodes = parser.add_argument_group(
        "EKS GPU nodes", "instead of an event: what one idle sweep would decide for each node of a metrics export"
    )
    nodes.add_argument(
        "--metrics",
        metavar="FILE",
        help="a Prometheus range-query JSON answer or text exposition (with timestamps) of DCGM exporter series, or "
        "Container Insights performance log events (aws logs filter-log-events output, or JSON Lines)",
    )
    nodes.add_argument("--node", help="--metrics: only this node (instance id or node name)")
    nodes.add_argument("--at", help="--metrics: the sweep's time, ISO 8601 (default: the end of the export)")
    parser.add_argument("--json", action="store_true", help="print the decision object as JSON")
    parser.set_defaults(run=run)


#: The most a file may hold once decompressed: a delivered CloudTrail file is a few MiB (the audit engine's bound).
MAX_EVENT_BYTES = 256 * 1024**2
GZIP_MAGIC = b"\x1f\x8b"


def _read_text(path: str) -> str:
    """The file's text: a CloudTrail file as delivered (``.json.gz``, recognised by its gzip header) is decompressed,
    up to :data:`MAX_EVENT_BYTES`; anything else is read as UTF-8 JSON."""
    import gzip
    import zlib

    from governor_cli.main import UsageError

    if path == "-":
        return sys.stdin.read()
    with Path(path).open("rb") as handle:
        compressed = handle.read(2) == GZIP_MAGIC
    if not compressed:
        return Path(path).read_text(encoding="utf-8")
    try:
        with gzip.open(path, "rb") as handle:
            data = handle.read(MAX_EVENT_BYTES + 1)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise UsageError(f"{path}: not a readable gzip file ({error.__class__.__name__})") from None
    if len(data) > MAX_EVENT_BYTES:
        raise UsageError(f"{path}: more than {MAX_EVENT_BYTES // 1024**2} MiB once decompressed; not a CloudTrail file")
    return data.decode("utf-8")


def _read_event(path: str) -> Any:
    from governor_cli.main import UsageError

    try:
        text = _read_text(path)
    except (OSError, UnicodeDecodeError) as error:
        detail = getattr(error, "strerror", None) or error.__class__.__name__
        raise UsageError(f"{_name(path)}: cannot read the event ({detail})") from None
    if not text.strip():
        raise UsageError(f"{_name(path)}: empty, expected an event as JSON")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{_name(path)}: not valid JSON (line {error.lineno}: {error.msg})") from None
    except RecursionError:
        raise UsageError(f"{_name(path)}: JSON nested too deeply") from None


def _name(path: str) -> str:
    return "standard input" if path == "-" else path


def _records(raw: Any, source: str) -> list[Any] | None:
    """The records of a whole CloudTrail file (``{"Records": [...]}``), or None for a single event."""
    from governor_cli.main import UsageError

    if not (isinstance(raw, dict) and "Records" in raw and "detail" not in raw and "eventName" not in raw):
        return None
    records = raw["Records"]
    if not isinstance(records, list):
        raise UsageError(f"{source}: Records must be a list of CloudTrail records, not {type(records).__name__}")
    if not records:
        raise UsageError(f"{source}: Records is empty, there is nothing to explain")
    return records


def headline(result: dict[str, Any]) -> str:
    """ACT only when something would really be done; a report-only policy's act is WOULD ACT (only a finding is
    sent), so the word never promises what the policy will not do."""
    verdict = str(result["verdict"])
    if verdict != "act":
        return verdict.upper()
    enforced = any(a.get("enforced") for d in result["decisions"] for a in d["actions"])
    return "ACT" if enforced else "WOULD ACT (report-only)"


def _decision_verdict(decision: dict[str, Any]) -> str:
    if decision["verdict"] == "act" and not any(a.get("enforced") for a in decision["actions"]):
        return "would act"
    return str(decision["verdict"])


def summary(results: list[dict[str, Any]]) -> str:
    """One line over a whole CloudTrail file: how many records, and how many of each headline."""
    counts: dict[str, int] = {}
    for result in results:
        word = headline(result).split(" (")[0]
        counts[word] = counts.get(word, 0) + 1
    order = ("ACT", "WOULD ACT", "OK", "IGNORED")
    parts = [f"{counts[word]} {word}" for word in order if counts.get(word)]
    return f"{len(results)} records: {', '.join(parts)}"


def rule_line(rule: dict[str, Any]) -> str:
    """The decision-table row that decided (``governor.idle.table``), in one line: which row, for which state and
    when, and what it gives."""
    when = f"when {' and '.join(rule['when'])}" if rule["when"] else "no earlier row matched"
    return (
        f"{rule['table']} table row {rule['row']} ({rule['name']}): status {', '.join(rule['status'])}, {when} -> "
        f"{rule['rule']}, {rule['verdict']}"
    )


def render_text(result: dict[str, Any]) -> str:
    """The decision as an operator reads it. Event ids, resources, reasons and action details carry values from the
    event (tags, names, CloudTrail strings): each line goes through the terminal's one escape, so a value holding a
    newline, ESC or U+202E stays inside its own line and shows as written."""
    from governor.domain.escape import terminal_text

    lines = [f"event {result['event']['id']} ({result['event']['kind']}): {headline(result)}"]
    if not result["decisions"]:
        lines.append("  no policy handles this event")
    for decision in result["decisions"]:
        lines.append(f"  [{decision['policy']}] {_decision_verdict(decision)} {decision['resource']}")
        if isinstance(decision.get("rule"), dict):
            lines.append(f"    rule: {rule_line(decision['rule'])}")
        for reason in decision["reasons"]:
            lines.append(f"    why: {reason}")
        for action in decision["actions"]:
            mode = "enforced" if action.get("enforced") else "report-only"
            details = ", ".join(f"{k}={v}" for k, v in action.items() if k not in {"type", "enforced"})
            lines.append(f"    do:  {action['type']} ({mode}){': ' + details if details else ''}")
        for assumption in decision["assumptions"]:
            # the live state explain stood in for ("assumed: ..."), then what the decision itself could not check
            label, text = ("assumed", assumption[9:]) if assumption.startswith("assumed: ") else ("assumes", assumption)
            lines.append(f"    {label}: {text}")
    return "\n".join(terminal_text(line) for line in lines)


def run(args: argparse.Namespace) -> int:
    from governor.explain import explain
    from governor_cli.main import UsageError

    try:
        policy = resolve_policy(args.policy)[0]
    except PolicyError as error:
        raise UsageError(str(error)) from None
    if args.metrics is not None:
        return _run_nodes(args, policy)
    for option in ("node", "at"):
        if getattr(args, option) is not None:
            raise UsageError(f"--{option} goes with --metrics, not with an event")
    if args.instances:
        if args.event is not None:
            raise UsageError("explain takes an event or --instances FILE, not both")
        return _instances(args, policy)
    if args.event is None:
        raise UsageError("explain needs an event file (or - for standard input), --instances FILE or --metrics FILE")
    source = _name(args.event)
    raw = _read_event(args.event)
    records = _records(raw, source)
    if records is None:
        try:
            result = explain(raw, policy)
        except InvalidEventError as error:
            raise UsageError(f"{source}: {error}") from None
        print(json.dumps(result, indent=2, default=str) if args.json else render_text(result))
        return 0
    results = []
    for index, record in enumerate(records):
        try:
            results.append(explain(record, policy))
        except InvalidEventError as error:
            raise UsageError(f"{source}: Records[{index}]: {error}") from None
    if args.json:
        print(json.dumps(results, indent=2, default=str))
    else:
        print("\n\n".join(render_text(result) for result in results))
        print(f"\n{summary(results)}")
    return 0


def _run_nodes(args: argparse.Namespace, policy: Any) -> int:
    import datetime as dt

    from governor_cli.commands.backtest import read_instances
    from governor_cli.explain_nodes import explain_export
    from governor_cli.main import UsageError
    from governor_cli.sim.metrics_file import MetricsFileError

    if args.event is not None:
        raise UsageError("explain takes an event or --metrics FILE, not both")
    at = None
    if args.at is not None:
        try:
            at = dt.datetime.fromisoformat(args.at.strip().replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"--at {args.at!r}: not ISO 8601 (e.g. 2026-11-01T12:00:00Z)") from None
        at = at.replace(tzinfo=dt.UTC) if at.tzinfo is None else at.astimezone(dt.UTC)
    instances = read_instances(Path(args.instances)) if args.instances else None
    path = Path(args.metrics)
    try:
        results = explain_export(path, policy, at=at, node=args.node, instances=instances)
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot read the metrics export ({error.__class__.__name__})") from None
    except MetricsFileError as error:
        raise UsageError(str(error)) from None
    if args.json:
        print(json.dumps(results, indent=2, default=str))
    else:
        print("\n\n".join(render_text(result) for result in results))
        if len(results) > 1:
            print(f"\n{summary(results).replace('records', 'nodes')}")
    return 0


def _instances(args: argparse.Namespace, policy: Any) -> int:
    """``--instances``: the idle sweep's decisions, each instance assumed idle for the window (stated as such)."""
    import datetime as dt

    from governor.adapters.capacity import to_reservation
    from governor.idle.explain import explained, preview_instances
    from governor_cli.commands.backtest import read_instances
    from governor_cli.main import UsageError

    instances = read_instances(Path(args.instances))
    reservations = {}
    if args.reservations:
        data = _read_event(args.reservations)
        try:
            reservations = {r.id: r for r in (to_reservation(raw) for raw in data["CapacityReservations"])}
        except (KeyError, TypeError, ValueError) as error:
            raise UsageError(
                f"{args.reservations}: not a DescribeCapacityReservations response (CapacityReservations[]): "
                f"{error.__class__.__name__}: {error}"
            ) from None
    hyperpod: dict[str, str] | None = {} if args.hyperpod_cluster else None
    for given in args.hyperpod_cluster:
        name, _, path = given.partition("=")
        if not name or not path:
            raise UsageError(f"--hyperpod-cluster {given}: expected NAME=FILE")
        data = _read_event(path)
        try:
            hyperpod.update({str(n["InstanceId"]): name for n in data["ClusterNodeSummaries"]})  # type: ignore[union-attr]
        except (KeyError, TypeError) as error:
            raise UsageError(
                f"{path}: not a ListClusterNodes response (ClusterNodeSummaries[].InstanceId): "
                f"{error.__class__.__name__}: {error}"
            ) from None
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    found = preview_instances(list(instances.values()), policy, now, reservations=reservations, hyperpod=hyperpod)
    result = explained([d for d, _ in found], now, [row for _, row in found])
    print(json.dumps(result, indent=2, default=str) if args.json else render_text(result))
    return 0
