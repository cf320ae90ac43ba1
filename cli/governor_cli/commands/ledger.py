"""``governor ledger export``: the DynamoDB ledger as JSON lines, the input of ``governor report --ledger FILE``.

One ledger item per line, with its ``kind``. Decisions come from the ledger's ``by-kind`` index (``at >= --since``);
usage sessions are exported when they overlap the period (still open, or ended after ``--since``), because a
session that started before the period still contributes GPU-hours to it.

``--only-account`` and ``--only-region`` (repeatable, or comma lists) keep the items of those accounts and regions: a
decision by its own stamp, a usage session or other instance-keyed item by its instance's decisions
(``domain.report.origins``); an item nowhere attributable is left out and counted. ``--region`` is where the table
lives (``governor_cli.flags``: one meaning per flag name in every command).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from governor.adapters.delivery import DELIVERY_KIND
from governor.domain.interruptions import RECORD_KIND
from governor.domain.times import parse_bounded, parse_time
from governor.idle.domain import MARK_KIND
from governor.lifecycle.domain import LAUNCH, OPEN_SESSION, SESSION
from governor.notifier.domain import MERGE_KIND
from governor.spot.domain import REBALANCE_KIND
from governor_cli.aws_access import REGION_NAME
from governor_cli.flags import add_region, add_table

DEFAULT_KINDS = ("decision", SESSION)
_TABLE = re.compile(r"^([a-zA-Z0-9_.-]{3,255}|arn:aws[a-z-]*:dynamodb:[a-z0-9-]+:\d{12}:table/[a-zA-Z0-9_.-]{3,255})$")
# every kind of item the governor's functions write to the ledger (``--kind`` accepts only these)
KINDS = (
    "decision",
    SESSION,
    OPEN_SESSION,
    LAUNCH,
    RECORD_KIND,
    REBALANCE_KIND,
    MARK_KIND,
    MERGE_KIND,
    DELIVERY_KIND,
)


class LedgerReader(Protocol):
    def query_kind(self, kind: str, since: dt.datetime | None = None) -> list[dict[str, Any]]: ...


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("ledger", help="read the decision ledger")
    actions = parser.add_subparsers(dest="ledger_command", metavar="ACTION")
    export = actions.add_parser("export", help="write ledger items as JSON lines (for governor report --ledger)")
    add_table(export, required=True)
    export.add_argument("--out", required=True, help="file to write, one JSON object per line")
    export.add_argument("--since", help="ISO 8601 date or time; only items from then on (sessions: overlapping it)")
    export.add_argument(
        "--kind",
        action="append",
        dest="kinds",
        help=f"item kind to export, one of {', '.join(KINDS)}; repeatable (default: {', '.join(DEFAULT_KINDS)})",
    )
    add_origin_filters(export)
    add_region(export)
    export.set_defaults(run=run)
    parser.set_defaults(run=_usage(parser))


def _usage(parser: argparse.ArgumentParser) -> Any:
    def run(args: argparse.Namespace) -> int:
        from governor_cli.main import UsageError

        raise UsageError("ledger needs an action: governor ledger export --table NAME --out FILE.jsonl")

    return run


ACCOUNT_ID = re.compile(r"^\d{12}$")


def add_origin_filters(parser: argparse.ArgumentParser) -> None:
    """``--only-account`` and ``--only-region`` (``governor_cli.flags``): repeatable, each also a comma list."""
    from governor_cli.flags import add_only_filters

    add_only_filters(parser)


def _values(given: list[str] | None) -> list[str]:
    return [part.strip() for value in given or [] for part in value.split(",")]


def parse_origins(accounts: list[str] | None, regions: list[str] | None) -> tuple[frozenset[str], frozenset[str]]:
    """The accounts and regions asked for (empty: all); a bad one is a UsageError naming the flag and the value."""
    from governor_cli.main import UsageError

    chosen_accounts = _values(accounts)
    for account in chosen_accounts:
        if not ACCOUNT_ID.match(account):
            raise UsageError(f"--only-account {account!r}: an AWS account id is 12 digits, such as 111122223333")
    chosen_regions = _values(regions)
    for region in chosen_regions:
        if not REGION_NAME.match(region):
            raise UsageError(f"--only-region {region!r}: not a region name such as us-east-1")
    return frozenset(chosen_accounts), frozenset(chosen_regions)


def filter_origins(
    items: list[dict[str, Any]],
    accounts: frozenset[str],
    regions: frozenset[str],
    decisions: list[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The items from the chosen accounts and regions, and those that could not be placed in any account (left out).

    ``decisions`` place the instance-keyed items (default: the decisions among ``items``); pass all of them when
    ``items`` is a period's slice, since a session's instance may have been decided on before the period.
    """
    from governor.report.sections.accounts import UNKNOWN_ORIGIN, origin_of, origins

    if not accounts and not regions:
        return items, []
    known = origins(items if decisions is None else decisions)
    kept: list[dict[str, Any]] = []
    unplaced: list[dict[str, Any]] = []
    for item in items:
        origin = origin_of(item, known)
        if origin == UNKNOWN_ORIGIN:
            unplaced.append(item)
        elif (not accounts or origin[0] in accounts) and (not regions or origin[1] in regions):
            kept.append(item)
    return kept, unplaced


def table_region(table: str, given: str | None) -> str:
    """Where the table lives: ``--region``, else the region in a table ARN, else the environment's or the profile's;
    none is a one-line error naming what to set (``governor_cli.aws_access.resolve_region``)."""
    from governor_cli.aws_access import resolve_region

    return resolve_region(given, table.split(":")[3] if table.startswith("arn:") and table.count(":") >= 5 else None)


def parse_since(value: str | None) -> dt.datetime | None:
    """A date (midnight UTC) or a time; raises UsageError naming the bad value."""
    from governor_cli.main import UsageError

    if value is None:
        return None
    try:
        return parse_bounded(value, "--since")
    except ValueError as error:
        raise UsageError(str(error)) from None


def check_kinds(kinds: list[str] | None) -> list[str]:
    """The kinds to export; an unknown one is an error with the closest known kind, never a silent empty export."""
    from governor_cli.main import UsageError, did_you_mean

    for kind in kinds or []:
        if kind not in KINDS:
            raise UsageError(
                f"--kind {kind}: no such ledger item kind{did_you_mean(kind, KINDS)}; one of {', '.join(KINDS)}"
            )
    return list(dict.fromkeys(kinds)) if kinds else list(DEFAULT_KINDS)


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
    from governor_cli.aws_access import failure
    from governor_cli.main import UsageError

    if not _TABLE.match(args.table):
        raise UsageError(f"--table {args.table!r}: a DynamoDB table name (3-255 of a-z A-Z 0-9 _ . -) or table ARN")
    since = parse_since(args.since)
    kinds = check_kinds(args.kinds)
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"{out}: folder {out.parent} does not exist")
    if out.is_dir():
        raise UsageError(f"{out}: is a folder; --out takes the file to write")
    accounts, regions = parse_origins(args.accounts, args.regions)
    filtering = bool(accounts or regions)
    try:
        ledger = DynamoLedger(args.table, region=table_region(args.table, args.region))
        read = list(export_items(ledger, kinds, since))
        # Sessions are placed by their instance's decisions, which may be older than --since: all of them.
        placing = list(export_items(ledger, ["decision"], None)) if filtering else []
    except (ClientError, BotoCoreError) as error:
        raise failure(error, f"ledger table {args.table}") from None
    items, unknown = filter_origins(read, accounts, regions, placing)
    unplaced = len(unknown)
    try:
        count = write_jsonl(items, out)
    except OSError as error:
        raise UsageError(f"{out}: cannot write the export ({error.strerror or error.__class__.__name__})") from None
    by_kind = {kind: sum(1 for item in items if item["kind"] == kind) for kind in kinds}
    summary = ", ".join(f"{n} {kind}" for kind, n in by_kind.items())
    where = ""
    if filtering:
        chosen = [f"account {', '.join(sorted(accounts))}"] if accounts else []
        chosen += [f"region {', '.join(sorted(regions))}"] if regions else []
        left_out = f"; {unplaced} in no known account left out" if unplaced else ""
        where = f" from {' and '.join(chosen)}{left_out}"
    from governor.domain.escape import terminal_text

    print(terminal_text(f"{out}: {count} items ({summary}){where}"))
    return 0
