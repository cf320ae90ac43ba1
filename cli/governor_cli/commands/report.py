"""``governor report --logs DIR [--ledger FILE] --out DIR``: the scheduled report, rendered locally.

Same report code as the ``report`` Lambda: the audit queries run on DuckDB instead of Athena, the ledger comes from a
``governor ledger export`` file instead of DynamoDB, and the chart is drawn with matplotlib instead of CloudWatch.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from governor.domain.times import EARLIEST, LATEST, bounded, parse_bounded, parse_time
from governor.policy import PolicyError, resolve_policy
from governor_cli import progress


def register(subparsers: Any) -> None:
    from governor_cli.flags import add_policy, add_quiet

    parser = subparsers.add_parser("report", help="render the security and cost report locally")
    parser.add_argument("--logs", required=True, help="folder of CloudTrail files (.json / .json.gz)")
    parser.add_argument("--ledger", help="ledger export: JSON lines (governor ledger export) or a JSON array")
    parser.add_argument("--out", required=True, help="folder for report.html, slack.json, CSVs and chart.png")
    add_policy(parser)
    add_quiet(parser)
    parser.add_argument("--start", help="period start, ISO 8601 (default: the first record of the logs or the ledger)")
    parser.add_argument(
        "--end", help="period end, ISO 8601 (default: the ledger's last record or just after the last event)"
    )
    parser.add_argument(
        "--kind",
        choices=["daily", "weekly", "custom"],
        default="custom",
        help="daily: the one UTC day before --end; weekly: the seven days before --end; custom: --start to --end "
        "(default: custom, the logs' own span)",
    )
    parser.add_argument(
        "--history",
        help="folder of earlier runs' summaries for the trend (default: OUT/history); this run's summary is added",
    )
    parser.add_argument(
        "--inputs",
        metavar="FILE",
        help="a report's inputs.json (written beside every report): price with the rates it recorded (never reading "
        "Cost Explorer or the Price List API again), its period and its policy unless given, so the same report comes "
        "out with the same money",
    )
    from governor_cli.commands.ledger import add_origin_filters

    add_origin_filters(parser)  # narrows the ledger (spend, idle, findings); the audit covers every file in --logs
    parser.set_defaults(run=run)


def _ledger_time(value: str | None) -> str | None:
    if value is None:
        return value
    parsed = parse_time(value)
    if parsed is None:
        raise ValueError(f"{value[:40]!r} is not an ISO 8601 time")
    bounded(parsed, "time")
    return value


LedgerTime = Annotated[str | None, AfterValidator(_ledger_time)]
Count = Annotated[float | None, Field(ge=0, le=10**6, allow_inf_nan=False)]


class LedgerItem(BaseModel):
    """The fields the report reads from ledger items, with their types; anything else passes through untouched.

    Numbers may come as text: ``governor ledger export`` writes DynamoDB's decimals with ``str``.
    """

    model_config = ConfigDict(extra="allow")

    kind: str | None = None
    policy: str | None = None
    verdict: str | None = None
    resource: str | None = None
    rule: str | None = None
    instance_id: str | None = None
    instance_type: str | None = None
    owner: str | None = None
    team: str | None = None
    creator: str | None = None
    status: str | None = None
    source: str | None = None
    at: LedgerTime = None
    start: LedgerTime = None
    end: LedgerTime = None
    warned_at: LedgerTime = None
    window_start: LedgerTime = None
    window_end: LedgerTime = None
    idle_since: LedgerTime = None
    gpus: Count = None
    price_per_hour: Count = None
    on_demand_per_hour: Count = None
    window_minutes: Count = None
    evidence: dict[str, Any] | None = None
    actions: list[Any] | None = None
    enforced: bool | None = None


def _check_items(path: Path, items: list[Any], lines: list[int] | None) -> None:
    from governor_cli.main import UsageError

    for index, item in enumerate(items):
        where = f"line {lines[index]}" if lines else f"item {index + 1}"
        if not isinstance(item, dict):
            raise UsageError(f"{path}: {where}: a ledger item must be a JSON object, not {type(item).__name__}")
        try:
            LedgerItem.model_validate(item)
        except ValidationError as error:
            first = error.errors(include_input=False)[0]
            field = ".".join(str(part) for part in first["loc"])
            reason = first["msg"].removeprefix("Value error, ")
            raise UsageError(f"{path}: {where}: {field}: {reason}") from None


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """JSON lines or one JSON array of ledger items; a bad line is named, never skipped silently."""
    from governor_cli.main import UsageError

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot read the ledger export ({error.__class__.__name__})") from None
    stripped = text.lstrip()
    lines: list[int] | None = None
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}: not valid JSON (line {error.lineno}: {error.msg})") from None
        except RecursionError:
            raise UsageError(f"{path}: JSON nested too deeply to be a ledger export") from None
        items = data
    else:
        items, lines = [], []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise UsageError(f"{path}: line {number} is not valid JSON ({error.msg})") from None
            except RecursionError:
                raise UsageError(f"{path}: line {number} is nested too deeply to be a ledger item") from None
            lines.append(number)
    _check_items(path, items, lines)
    return items


def _time(value: str | None, label: str) -> dt.datetime | None:
    from governor_cli.main import UsageError

    if value is None:
        return None
    try:
        return parse_bounded(value, f"--{label}")
    except ValueError as error:
        raise UsageError(str(error)) from None


def period(
    kind: str, start: dt.datetime | None, end: dt.datetime | None, last_event: dt.datetime | None
) -> tuple[dt.datetime | None, dt.datetime | None]:
    """A daily report covers one whole UTC day and a weekly one seven, ending at ``--end`` (default: midnight after
    the last event); ``--start``, when given with them, must agree. A custom report is ``--start`` to ``--end``."""
    from governor_cli.main import UsageError

    if kind == "custom":
        return start, end
    days = 7 if kind == "weekly" else 1
    if end is None:
        if start is not None:
            end = start + dt.timedelta(days=days)
        else:
            anchor = last_event or dt.datetime.now(dt.UTC)
            end = anchor.replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)
    expected = end - dt.timedelta(days=days)
    if start is not None and start != expected:
        raise UsageError(
            f"--kind {kind} covers {days} day{'s' if days > 1 else ''} ending at --end: --start must be "
            f"{expected.isoformat()} (or use --kind custom)"
        )
    return expected, end


def ledger_span(items: list[dict[str, Any]]) -> tuple[dt.datetime, dt.datetime] | None:
    """The first and the last time the ledger recorded anything (a decision, a session, a delivery)."""
    times = [t for t in (parse_time(item.get("at")) for item in items if isinstance(item, dict)) if t is not None]
    return (min(times), max(times)) if times else None


def default_period(
    kind: str,
    start: dt.datetime | None,
    end: dt.datetime | None,
    trail: tuple[dt.datetime, dt.datetime] | None,
    ledger: tuple[dt.datetime, dt.datetime] | None,
) -> tuple[dt.datetime | None, dt.datetime | None]:
    """The period a report covers when the flags leave it open: the trail's span and the ledger's together, so the
    report of a demo or a past day gives the same figures as the report made at the time.

    A custom report runs from the first record of either to just after the trail's last event or to the ledger's
    last record (the sweep that closes the period: like the scheduled report, it counts to the next period).
    Daily and weekly reports end at the midnight after the later of the two.
    """
    trail_end = trail[1] + dt.timedelta(seconds=1) if trail else None
    firsts = [t for t in (trail[0] if trail else None, ledger[0] if ledger else None) if t is not None]
    lasts = [t for t in (trail_end, ledger[1] if ledger else None) if t is not None]
    if kind == "custom":
        if ledger is None:
            return start, end  # the audit's own default: the trail's span
        return start or min(firsts), end or max(lasts)
    return period(kind, start, end, max(lasts) if lasts else None)


#: A trail that starts or stops more than this inside the period is said to cover only part of it (a real trail has
#: records all day; minutes without any are normal).
COVERAGE_GAP = dt.timedelta(hours=1)


def coverage_notes(
    start: dt.datetime, end: dt.datetime, trail: tuple[dt.datetime, dt.datetime] | None, ledger: list[dict[str, Any]]
) -> list[str]:
    """What part of the period the trail does not cover, and what the ledger holds outside it: said in the report
    rather than silently giving other figures."""
    notes: list[str] = []
    if trail is None or trail[1] < start or trail[0] >= end:
        notes.append("the CloudTrail files hold no record in this period: the audit counts are zero, not measured")
    elif trail[0] - start > COVERAGE_GAP or end - trail[1] > COVERAGE_GAP:
        notes.append(
            f"the CloudTrail records cover only {max(trail[0], start):%Y-%m-%d %H:%M:%S} to "
            f"{min(trail[1], end):%Y-%m-%d %H:%M:%S} UTC of this period: the audit counts (and the trail's "
            "instance-hours) are for that part; spend and idle figures come from the ledger"
        )
    times = [parse_time(item.get("at")) for item in ledger if isinstance(item, dict)]
    before = sum(1 for t in times if t is not None and t < start)
    after = sum(1 for t in times if t is not None and t > end)
    if before or after:
        notes.append(
            f"ledger records outside this period left out: {before:,} before it, {after:,} after it "
            "(sessions that overlap the period are counted for their part in it)"
        )
    return notes


def read_history(folder: Path) -> list[Any]:
    """Earlier runs' ``summary.json`` points; an unreadable one is skipped with a note, never fatal."""
    from governor.report.model import TrendPoint

    points = []
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            try:
                points.append(TrendPoint.model_validate_json(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
    return points


def read_inputs(path: str | None) -> Any:
    """The recorded inputs a rerun prices with (``--inputs``), or None."""
    from governor.report.inputs import RunInputs
    from governor_cli.main import UsageError

    if path is None:
        return None
    try:
        return RunInputs.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"{path}: cannot read the inputs ({error.__class__.__name__})") from None
    except ValueError:
        raise UsageError(f"{path}: not a report's inputs.json") from None


def run_policy(args: argparse.Namespace, inputs: Any) -> Any:
    """``--policy``; else the policy the recorded run ran with; else ``resolve_policy``'s default."""
    from governor.policy import parse_policy
    from governor_cli.main import UsageError

    try:
        if args.policy is None and inputs is not None and inputs.policy:
            return parse_policy(inputs.policy)
        return resolve_policy(args.policy)[0]
    except PolicyError as error:
        raise UsageError(str(error)) from None


def prices_for(args: argparse.Namespace, policy: Any, inputs: Any, until: dt.datetime) -> tuple[Any, list[str]]:
    """The price book: replaying the recorded inputs when given (and a note saying so), else read live."""
    from governor.report.build import price_book
    from governor.report.inputs import replay_note, replayed_book

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if inputs is None:
        return price_book(policy, region, until=until), []
    return replayed_book(inputs, policy, region), [replay_note(inputs, args.inputs)]


def run(args: argparse.Namespace) -> int:
    from governor.audit.engine import event_span, run_audit
    from governor.audit.queries import QueryError, list_queries
    from governor.report.build import build_report, with_history
    from governor.report.chart_image import render_fleet_png
    from governor.report.domain import previous_period
    from governor.report.inputs import FILE as INPUTS_FILE
    from governor.report.inputs import recorded_inputs
    from governor.report.render.csv_files import csv_files, resources_csv
    from governor.report.render.format import would_reclaim_text
    from governor.report.render.html_page import render_html
    from governor.report.render.slack import render_text, slack_messages
    from governor_cli.main import UsageError

    inputs = read_inputs(getattr(args, "inputs", None))
    policy = run_policy(args, inputs)
    logs = Path(args.logs)
    if not logs.is_dir():
        raise UsageError(f"{logs}: not a folder of CloudTrail files")
    from governor_cli.commands.ledger import filter_origins, parse_origins

    accounts, regions = parse_origins(getattr(args, "accounts", None), getattr(args, "regions", None))
    ledger = read_ledger(Path(args.ledger)) if args.ledger else []
    ledger, unplaced = filter_origins(ledger, accounts, regions)
    start, end = _time(args.start, "start"), _time(args.end, "end")
    if inputs is not None and args.kind == "custom" and start is None and end is None:
        start, end = inputs.start, inputs.end  # the recorded run's period
    if start is not None and end is not None and end <= start:
        raise UsageError(f"--end {args.end} is not after --start {args.start}")
    try:
        span = event_span(logs)
    except QueryError as error:
        raise UsageError(str(error)) from None
    kept = ledger_span(ledger)
    if span is None and kept is None and (start is None or end is None):
        raise UsageError(
            f"{logs}: no CloudTrail record with a time in {EARLIEST:%Y-%m-%d} .. {LATEST:%Y-%m-%d} (UTC) found; "
            "give --start and --end for an empty report"
        )
    try:
        start, end = default_period(args.kind, start, end, span, kept)
    except OverflowError:
        raise UsageError(
            f"{logs}: the records' times reach {span[1] if span else '?'}, past the last date a report can cover; "
            "give --start and --end"
        ) from None
    try:
        shown = progress.steps(f"report: audit of {logs}", quiet=args.quiet)
        try:
            current = run_audit(logs, start=start, end=end, progress=shown)
        finally:
            shown.close()
        if not current.records and not (start and end):
            skipped = f", {len(current.skipped)} file(s) skipped" if current.skipped else ""
            raise UsageError(
                f"{logs}: no CloudTrail records found{skipped}; give --start and --end for an empty report"
            )
        begin = dt.datetime.fromisoformat(current.start.replace("Z", "+00:00"))
        finish = dt.datetime.fromisoformat(current.end.replace("Z", "+00:00"))
        before_start, before_end = previous_period(begin, finish)
        shown = progress.steps(f"report: previous period of {logs}", quiet=args.quiet)
        try:
            previous = run_audit(logs, start=before_start, end=before_end, progress=shown)
        finally:
            shown.close()
        previous_results = previous.results if span is not None and span[0] < begin else None
        descriptions = {spec.name: spec.purpose + (f" (CIS {spec.cis})" if spec.cis else "") for spec in list_queries()}
    except QueryError as error:
        raise UsageError(str(error)) from None
    notes = [f"{name}: skipped ({why})" for name, why in current.skipped]
    notes.extend(coverage_notes(begin, finish, span, ledger))
    if accounts or regions:
        chosen = sorted(accounts) + sorted(regions)
        notes.append(
            f"ledger narrowed to {', '.join(chosen)}"
            + (f" ({len(unplaced)} items in no known account left out)" if unplaced else "")
            + "; the audit queries cover every file under --logs"
        )
    book, replayed = prices_for(args, policy, inputs, finish)
    notes.extend(replayed)
    report = build_report(
        kind=args.kind,
        start=begin,
        end=finish,
        policy=policy,
        audit=current.results,
        previous_audit=previous_results,
        ledger_items=ledger,
        descriptions=descriptions,
        notes=notes,
        prices=book,
    )
    out = Path(args.out)
    history = Path(args.history) if args.history else out / "history"
    with_history(report, read_history(history))
    try:
        out.mkdir(parents=True, exist_ok=True)
        chart = render_fleet_png(
            report.charts, title="Fleet GPU-hours: busy, idle and unmonitored", period=(report.start, report.end)
        )
        (out / report.chart_file).write_bytes(chart)
        (out / "report.html").write_text(render_html(report), encoding="utf-8")
        (out / "email.html").write_text(
            render_html(report, chart_src=report.chart_file, inline_svg=False), encoding="utf-8"
        )
        (out / "email.txt").write_text(render_text(report), encoding="utf-8")
        history.mkdir(parents=True, exist_ok=True)
        point = report.trend_point()
        (history / f"{point.kind}-{point.start:%Y%m%dT%H%M}-{point.end:%Y%m%dT%H%M}.json").write_text(
            point.model_dump_json(indent=2), encoding="utf-8"
        )
        (out / "report.json").write_text(report.model_dump_json(indent=2), encoding="utf-8")
        recorded = recorded_inputs(book, args.kind, begin, finish, policy.model_dump(mode="json", by_alias=True))
        (out / INPUTS_FILE).write_text(recorded.model_dump_json(indent=2), encoding="utf-8")
        messages = slack_messages(report)
        (out / "slack.json").write_text(json.dumps(messages, indent=2), encoding="utf-8")
        files = csv_files(
            report,
            {name: {**result, "columns": current.columns.get(name, [])} for name, result in current.results.items()},
        )
        files["resources.csv"] = resources_csv(report)
        for name, content in files.items():
            (out / name).write_text(content, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"{out}: cannot write the report ({error.__class__.__name__}: {error.strerror})") from None
    from governor.domain.escape import terminal_text as shown  # ledger values (teams, accounts) reach the terminal

    cost = report.cost
    opened = report.open_findings
    print(f"{report.kind} report {current.start} .. {current.end}: {current.records:,} CloudTrail records")
    print(
        f"  findings: {sum(1 for f in opened if f.severity == 'critical')} critical and "
        f"{sum(1 for f in opened if f.severity == 'warning')} warning open, "
        f"{len(report.findings) - len(opened)} resolved"
    )
    reclaim = (
        f"reclaimed {cost.idle_gpu_hours_reclaimed:,.1f} GPU-h, saved ${cost.savings_usd:,.2f}"
        if cost.idle_enforced or cost.savings_usd
        else f"would reclaim {cost.would_reclaim_gpu_hours:,.1f} GPU-h, ${cost.would_save_usd:,.2f}"
    )
    print(
        f"  GPU-hours {cost.gpu_hours_total:,.1f}  spend ${cost.cost_total_usd:,.2f}  "
        f"idle ${cost.idle_cost_usd:,.2f}  {reclaim}"
    )
    if cost.by_account is not None:
        for row in cost.by_account.rows:
            print(
                f"  account {shown(row['account'])} {shown(row['region'])}: GPU-hours {row['gpu_hours']:,.1f}  "
                f"spend ${row['cost_usd']:,.2f}  idle ${row['idle_usd']:,.2f}  "
                f"would reclaim {row['would_reclaim_gpu_hours']:,.1f} GPU-h"
            )
    for budget in report.budgets:
        print(
            f"  budget {shown(budget.label)}: ${budget.spent_usd:,.2f} of ${budget.budget_usd:,.2f}, "
            f"forecast ${budget.forecast_usd:,.2f}"
        )
    for query in report.security:
        if query.count:
            change = f" ({query.change_text()})" if query.change is not None else ""
            print(f"  audit {query.name:<28} {query.count:>6,} event{'' if query.count == 1 else 's'}{change}")
    quiet = sum(1 for q in report.security if not q.count)
    print(f"  ({quiet} other audit queries matched nothing)")
    if not cost.idle_enforced and cost.idle_would_act:
        print(f"  report-only: {would_reclaim_text(cost)} if enforced")
    for note in report.notes:
        print(f"  note: {shown(note)}")
    trend = f", trend over {len(report.trends) + 1} reports" if report.trends else ""
    print(
        f"wrote {out}/report.html, email.html, email.txt, report.json, {INPUTS_FILE}, slack.json "
        f"({len(messages)} message{'s' if len(messages) != 1 else ''}), {len(files)} CSVs, chart.png{trend}"
    )
    return 0
