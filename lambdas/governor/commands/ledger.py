"""``governor ledger export``: the DynamoDB ledger as JSON lines, the input of ``governor report --ledger FILE``.

One ledger item per line, with its ``kind``. Decisions come from the ledger's ``by-kind`` index (``at >= --since``);
usage sessions are exported when they overlap the period (still open, or ended after ``--since``), because a
session that started before the period still contributes GPU-hours to it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from governor.domain.lifecycle import SESSION
from governor.domain.times import parse_time

DEFAULT_KINDS = ("decision", SESSION)


class LedgerReader(Protocol):
    def query_kind(self, kind: str, since: dt.datetime | None = None) -> list[dict[str, Any]]: ...


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("ledger", help="read the decision ledger")
    actions = parser.add_subparsers(dest="ledger_command", metavar="ACTION")
    export = actions.add_parser("export", help="write ledger items as JSON lines (for governor report --ledger)")
    export.add_argument("--table", required=True, help="the ledger's DynamoDB table name (stack output)")
    export.add_argument("--out", required=True, help="file to write, one JSON object per line")
    export.add_argument("--since", help="ISO 8601 date or time; only items from then on (sessions: overlapping it)")
    export.add_argument(
        "--kind",
        action="append",
        dest="kinds",
        help=f"item kind to export; repeat for several (default: {', '.join(DEFAULT_KINDS)})",
    )
    export.add_argument("--region", help="AWS region of the table (default: the environment's)")
    export.set_defaults(run=run)
    parser.set_defaults(run=_usage(parser))


def _usage(parser: argparse.ArgumentParser) -> Any:
    def run(args: argparse.Namespace) -> int:
        from governor.cli import UsageError

        raise UsageError("ledger needs an action: governor ledger export --table NAME --out FILE.jsonl")

    return run


def parse_since(value: str | None) -> dt.datetime | None:
    """A date (midnight UTC) or a time; raises UsageError naming the bad value."""
    from governor.cli import UsageError

    if value is None:
        return None
    parsed = parse_time(value)
    if parsed is None:
        try:
            day = dt.date.fromisoformat(value)
        except ValueError:
            raise UsageError(f"--since {value!r}: not an ISO 8601 date or time (e.g. 2026-11-01)") from None
        parsed = dt.datetime.combine(day, dt.time(), dt.UTC)
    return parsed


def export_items(ledger: LedgerReader, kinds: Iterable[str], since: dt.datetime | None) -> Iterator[dict[str, Any]]:
    """Items of ``kinds`` for the period from ``since``; sessions by overlap, everything else by ``at``."""
    for kind in kinds:
        if kind == SESSION:
            for item in ledger.query_kind(kind):
                end = parse_time(item.get("end"))
                if since is None or end is None or end >= since:
                    yield {**item, "kind": kind}
        else:
            for item in ledger.query_kind(kind, since):
                yield {**item, "kind": kind}


def write_jsonl(items: Iterable[dict[str, Any]], out: Path) -> int:
    count = 0
    with out.open("w", encoding="utf-8") as handle:
        for item in items:
            handle.write(json.dumps(item, sort_keys=True, default=str) + "\n")
            count += 1
    return count


def run(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from governor.adapters.ledger import DynamoLedger
    from governor.cli import UsageError

    since = parse_since(args.since)
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"{out}: folder {out.parent} does not exist")
    kinds = args.kinds or list(DEFAULT_KINDS)
    try:
        ledger = DynamoLedger(args.table, region=args.region)
        items = list(export_items(ledger, kinds, since))
    except (ClientError, BotoCoreError) as error:
        raise UsageError(f"ledger table {args.table}: {error}") from None
    count = write_jsonl(items, out)
    by_kind = {kind: sum(1 for item in items if item["kind"] == kind) for kind in kinds}
    summary = ", ".join(f"{n} {kind}" for kind, n in by_kind.items())
    print(f"{out}: {count} items ({summary})")
    return 0
