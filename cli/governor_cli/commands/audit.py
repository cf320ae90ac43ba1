"""``governor audit --logs DIR``: the Athena query library on DuckDB over CloudTrail files on disk.

Exit codes: 0 when the queries ran (rows are information, not failures), 1 only with ``--fail-on-rows`` when a
selected query returned rows (a check the user asked for), 2 on bad input (unknown query, bad time, no folder).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from governor_cli import progress

TEXT_ROWS = 10
TEXT_WIDTH = 160
# The text view answers "when, what, on which resource, who": each query's own columns come right after the event
# name; context columns are left out of it (they are in --json and --csv).
TEXT_FIRST = ("eventtime", "eventname")
TEXT_LAST = ("actor", "errorcode", "errormessage")
TEXT_HIDDEN = frozenset({"eventid", "account", "region", "identity_type", "sourceipaddress", "eventsource", "request"})


def register(subparsers: Any) -> None:
    from governor_cli.flags import add_quiet

    parser = subparsers.add_parser("audit", help="run queries/*.sql on DuckDB over CloudTrail files")
    # --logs is required unless --list is asked for: the usage line says so, "(--logs DIR | --list)".
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--logs", metavar="DIR", help="folder of CloudTrail .json/.json.gz files (AWSLogs/... or flat)")
    what.add_argument("--list", action="store_true", help="list the queries (name, CIS item, purpose) and exit")
    parser.add_argument(
        "--query", action="append", dest="queries", metavar="NAME", help="run only this query (repeatable)"
    )
    parser.add_argument("--start", help="ISO 8601 start, inclusive (default: the first event)")
    parser.add_argument("--end", help="ISO 8601 end, exclusive (default: just after the last event)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help='print {"<query>": {"count": N, "rows": [...]}}')
    output.add_argument("--csv", action="store_true", help="print every row as CSV, with a leading query column")
    parser.add_argument(
        "--fail-on-rows", action="store_true", help="exit 1 when any selected query returns rows (use in CI)"
    )
    add_quiet(parser)
    parser.set_defaults(run=run)


def _time(value: str | None, flag: str) -> dt.datetime | None:
    from governor.domain.times import parse_bounded
    from governor_cli.main import UsageError

    if value is None:
        return None
    try:
        return parse_bounded(value, flag)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def write_csv(results: dict[str, dict[str, Any]], out: TextIO) -> None:
    """One CSV for every query: a ``query`` column, then the union of the queries' columns in first-seen order."""
    columns: dict[str, None] = {}
    for result in results.values():
        for row in result["rows"]:
            columns.update(dict.fromkeys(row))
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["query", *columns])
    for name, result in results.items():
        for row in result["rows"]:
            writer.writerow([name, *(_safe_cell(row.get(column)) for column in columns)])


def _safe_cell(value: Any) -> str:
    """Text from CloudTrail is neutralised against spreadsheet formulas (OWASP); numbers are written as they are."""
    from governor.domain.escape import csv_cell

    return str(csv_cell(_cell(value))) if isinstance(value, str) else _cell(value)


def _text_order(row: dict[str, Any]) -> list[str]:
    own = [k for k in row if k not in TEXT_HIDDEN and k not in TEXT_FIRST and k not in TEXT_LAST]
    return [k for k in TEXT_FIRST if k in row] + own + [k for k in TEXT_LAST if k in row]


def render_text(run: Any, specs: dict[str, Any]) -> str:
    """Each query's count and first rows. Row values are CloudTrail strings anyone who makes a call chooses (user
    agents, error messages, names): they go through the terminal's one escape before the line is cut to width."""
    from governor.domain.escape import terminal_text

    lines = []
    for name, result in run.results.items():
        spec = specs[name]
        cis = f" [CIS {spec.cis}]" if spec.cis else ""
        lines.append(f"{name}{cis}: {result['count']} row{'s' if result['count'] != 1 else ''} ({spec.purpose})")
        for row in result["rows"][:TEXT_ROWS]:
            text = terminal_text(", ".join(f"{k}={_cell(row[k])}" for k in _text_order(row) if row[k] is not None))
            lines.append("  " + (text if len(text) <= TEXT_WIDTH else text[: TEXT_WIDTH - 3] + "..."))
        if result["count"] > TEXT_ROWS:
            lines.append(f"  ... {result['count'] - TEXT_ROWS} more (use --json or --csv for every row)")
    lines.append(
        f"range {run.start} .. {run.end}: {run.records} records from {run.files_opened} files opened, "
        f"{run.files_pruned} outside the range not opened, {len(run.skipped)} skipped"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from governor.audit.engine import run_audit
    from governor.audit.queries import QueryError, list_queries
    from governor_cli.main import UsageError, did_you_mean

    try:
        specs = {spec.name: spec for spec in list_queries()}
    except QueryError as error:
        raise UsageError(str(error)) from None
    if args.list:
        for spec in specs.values():
            print(f"{spec.name:28} {('CIS ' + spec.cis) if spec.cis else '':8} {spec.purpose}")
        return 0
    if not args.logs:
        raise UsageError("--logs DIR is required: a folder of CloudTrail .json/.json.gz files")
    logs = Path(args.logs)
    if not logs.exists():
        raise UsageError(f"{logs}: no such folder")
    if not logs.is_dir():
        raise UsageError(f"{logs}: not a folder; --logs takes the folder that holds the CloudTrail files")
    for name in args.queries or []:
        if name not in specs:
            raise UsageError(f"unknown query {name}{did_you_mean(name, specs)}; see governor audit --list")
    start, end = _time(args.start, "--start"), _time(args.end, "--end")
    if start is not None and end is not None and end <= start:
        raise UsageError(f"--end {args.end} is not after --start {args.start}")
    try:
        shown = progress.steps(f"audit of {logs}", quiet=args.quiet)
        try:
            result = run_audit(logs, args.queries, start, end, progress=shown)
        finally:
            shown.close()
    except QueryError as error:
        raise UsageError(str(error)) from None
    from governor.domain.escape import terminal_text

    for file, reason in result.skipped:
        print(f"governor: skipped {terminal_text(file)}: {terminal_text(reason)}", file=sys.stderr)
    if args.fail_on_rows and not result.records:
        # a check over nothing must not pass: an empty folder, a wrong path or unreadable files all end up here
        skipped = f" ({len(result.skipped)} file(s) skipped)" if result.skipped else ""
        raise UsageError(f"{logs}: no CloudTrail records to check{skipped}; --fail-on-rows needs records")
    if args.json:
        print(json.dumps(result.results, indent=2, default=str))
    elif args.csv:
        write_csv(result.results, sys.stdout)
    else:
        print(render_text(result, specs))
        if start is None or end is None:
            print(
                "the range is the records' own span: instances still running at its end are counted up to it, and "
                "anything after the last record is left out; give --start and --end for the period you mean"
            )
    if args.fail_on_rows and any(r["count"] for r in result.results.values()):
        return 1
    return 0
