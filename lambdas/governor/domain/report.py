"""The scheduled security and cost report: its model, built from plain data, and its renderings.

Inputs are plain data so the same code serves the Lambda (Athena results, DynamoDB ledger) and ``governor report``
(DuckDB results, an exported ledger file): audit results ``{query: {"count", "rows"}}`` for this period and the
previous one, and ledger items (decisions and keyed items) as dictionaries. Outputs: HTML, Slack messages, CSVs, JSON.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from governor.domain import costs, spot
from governor.domain.notify import Message, context, escape_mrkdwn, header, pack_messages, section
from governor.domain.times import parse_time
from governor.policy import Policy, PriceEntry

ReportKind = Literal["daily", "weekly", "custom"]
RESERVED_QUERIES = {"gpu_instance_hours"}
UTILISATION_KEYS = ("max_gpu_utilization", "gpu_utilization_max", "max_utilization")
CELL_CHARS = 120


# --- model ---------------------------------------------------------------------------------------------------------


class Table(BaseModel):
    """A table shown in the report and attached in full as CSV."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]] = Field(default_factory=list)


class QuerySummary(BaseModel):
    """One audit query: how many rows this period, how many the period before, and the first rows."""

    name: str
    description: str = ""
    count: int
    previous_count: int | None = None
    columns: list[str] = Field(default_factory=list)
    top_rows: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = None

    @property
    def change(self) -> int | None:
        return None if self.previous_count is None else self.count - self.previous_count

    def change_text(self) -> str:
        change = self.change
        if change is None:
            return "no previous period"
        if change == 0:
            return "unchanged"
        return f"{change:+d} vs previous period"


class SpotStats(BaseModel):
    """Spot interruptions in the period and whether the checkpoint command reached (and finished on) the instance."""

    interruptions: int = 0
    rebalance_recommendations: int = 0
    checkpoints_requested: int = 0
    checkpoints_delivered: int = 0
    checkpoints_succeeded: int = 0
    mean_age_hours: float | None = None
    by_pool: Table = Field(
        default_factory=lambda: Table(
            name="spot_interruptions",
            title="Spot interruptions by week, instance type and zone",
            columns=["week", "instance_type", "zone", "interruptions"],
        )
    )


class CostSection(BaseModel):
    """GPU-hours and dollars by team, owner and type; idle hours; savings; Spot; rightsizing."""

    source: str = "ledger"
    gpu_hours_total: float = 0.0
    cost_total_usd: float = 0.0
    by_team: Table
    by_owner: Table
    by_type: Table
    idle_gpu_hours_detected: float = 0.0
    idle_gpu_hours_reclaimed: float = 0.0
    idle_instances_detected: int = 0
    idle_actions: int = 0
    savings_usd: float = 0.0
    # Report-only idle policy: what its stop/terminate decisions, enforced, would have given back (docs/idle.md).
    idle_gpu_hours_would_reclaim: float = 0.0
    idle_would_act: int = 0
    would_save_usd: float = 0.0
    spot: SpotStats = Field(default_factory=SpotStats)
    rightsizing: Table
    prices_as_of: str = ""
    notes: list[str] = Field(default_factory=list)


GOVERNOR_TAGS_TITLE = "Exemptions, snoozes and checkpoint names, by who set them"
GOVERNOR_TAGS_COLUMNS = ("who", "resource_id", "key", "value", "at", "honoured")


class Report(BaseModel):
    """Everything one report says; rendered to HTML, Slack, CSV and archived as JSON."""

    kind: ReportKind
    start: dt.datetime
    end: dt.datetime
    generated_at: dt.datetime
    security: list[QuerySummary]
    cost: CostSection
    utilisation: dict[str, list[tuple[dt.datetime, float]]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    dashboard_url: str | None = None
    chart_file: str = "chart.png"
    governor_tags: Table = Field(
        default_factory=lambda: Table(
            name="governor_tags", title=GOVERNOR_TAGS_TITLE, columns=list(GOVERNOR_TAGS_COLUMNS)
        )
    )

    @property
    def empty(self) -> bool:
        return not any(q.count for q in self.security) and self.cost.gpu_hours_total == 0 and not self.utilisation

    def tables(self) -> list[Table]:
        cost = self.cost
        return [cost.by_team, cost.by_owner, cost.by_type, cost.spot.by_pool, cost.rightsizing, self.governor_tags]


def governor_tags_table(items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime) -> Table:
    """Every exemption, snooze and checkpoint name set in the period, grouped by the person who set it (CloudTrail).

    Any account user can tag; this table is how the security team sees who keeps what out of the governor's reach.
    """
    rows = []
    for item in items:
        if item.get("kind") != "governor-tag":
            continue
        at = parse_time(item.get("at"))
        if at is None or not start <= at < end:
            continue
        rows.append(
            {
                "who": str(item.get("who") or "unknown"),
                "resource_id": str(item.get("resource_id") or ""),
                "key": str(item.get("key") or ""),
                "value": str(item.get("value") or ""),
                "at": at.isoformat(),
                "honoured": "no: " + str(item["problem"]) if item.get("problem") else "yes",
            }
        )
    rows.sort(key=lambda r: (r["who"], r["at"]))
    return Table(name="governor_tags", title=GOVERNOR_TAGS_TITLE, columns=list(GOVERNOR_TAGS_COLUMNS), rows=rows)


# --- periods -------------------------------------------------------------------------------------------------------


def period_for(kind: ReportKind, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """Daily: the previous whole UTC day. Weekly: the seven whole days before today (a Monday run covers Mon-Sun)."""
    today = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days = 7 if kind == "weekly" else 1
    return today - dt.timedelta(days=days), today


def previous_period(start: dt.datetime, end: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    return start - (end - start), start


# --- security ------------------------------------------------------------------------------------------------------


def security_section(
    current: Mapping[str, Mapping[str, Any]],
    previous: Mapping[str, Mapping[str, Any]] | None,
    top_rows: int,
    descriptions: Mapping[str, str] | None = None,
    errors: Mapping[str, str] | None = None,
) -> list[QuerySummary]:
    """Each query's count, its first ``top_rows`` rows and the change since the previous period, busiest first."""
    summaries = []
    names = (set(current) | set(errors or {})) - RESERVED_QUERIES
    for name in names:
        result = current.get(name, {})
        rows = list(result.get("rows", []))
        count = int(result.get("count", len(rows)))
        before = previous.get(name) if previous is not None else None
        summaries.append(
            QuerySummary(
                name=name,
                description=(descriptions or {}).get(name, ""),
                count=count,
                previous_count=int(before.get("count", len(before.get("rows", [])))) if before is not None else None,
                columns=_columns(rows),
                top_rows=[_plain_row(r) for r in rows[:top_rows]],
                error=(errors or {}).get(name),
            )
        )
    return sorted(summaries, key=lambda q: (-q.count, q.name))


def _columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return list(columns)


def _plain_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, dt.datetime | dt.date) else v) for k, v in row.items()}


# --- cost ----------------------------------------------------------------------------------------------------------


def utilisation_series(
    items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime
) -> dict[str, list[tuple[dt.datetime, float]]]:
    """Per instance, the busiest GPU's maximum utilisation at each idle sweep, from the idle decisions' evidence."""
    series: dict[str, list[tuple[dt.datetime, float]]] = defaultdict(list)
    for item in items:
        if item.get("kind", "decision") != "decision" or item.get("policy") != "idle":
            continue
        at = parse_time(item.get("at"))
        evidence = item.get("evidence") or {}
        value = next((evidence[k] for k in UTILISATION_KEYS if isinstance(evidence.get(k), int | float)), None)
        if at is None or value is None or not (start <= at < end):
            continue
        series[str(item.get("resource"))].append((at, float(value)))
    return {k: sorted(v) for k, v in sorted(series.items())}


def _cost_table(name: str, title: str, key: str, rows: Sequence[costs.CostRow]) -> Table:
    return Table(
        name=name,
        title=title,
        columns=[key, "sessions", "instance_hours", "gpu_hours", "cost_usd"],
        rows=[
            {
                key: row.key,
                "sessions": row.sessions,
                "instance_hours": round(row.instance_hours, 2),
                "gpu_hours": round(row.gpu_hours, 2),
                "cost_usd": round(row.cost_usd, 2),
            }
            for row in rows
        ],
    )


def _sessions_from_audit(rows: Iterable[Mapping[str, Any]], start: dt.datetime) -> list[dict[str, Any]]:
    """``gpu_instance_hours`` rows (creator, instance type, hours) as sessions, when the ledger holds none."""
    sessions = []
    for row in rows:
        instance_type = row.get("instance_type")
        hours = next(
            (float(v) for k, v in row.items() if k.endswith("hours") and "gpu" not in k and isinstance(v, int | float)),
            None,
        )
        if not instance_type or hours is None or hours <= 0:
            continue
        sessions.append(
            {
                "kind": "session",
                "instance_id": "(from CloudTrail)",
                "instance_type": str(instance_type),
                "owner": str(row.get("creator") or row.get("owner") or "unknown"),
                "team": "unknown",
                "start": start.isoformat(),
                "end": (start + dt.timedelta(hours=hours)).isoformat(),
            }
        )
    return sessions


def cost_section(
    items: Sequence[Mapping[str, Any]],
    policy: Policy,
    start: dt.datetime,
    end: dt.datetime,
    audit_hours: Iterable[Mapping[str, Any]] = (),
    prices: costs.PriceBook | None = None,
) -> CostSection:
    """GPU-hours and cost by team, owner and type; idle hours and savings; Spot; rightsizing (``domain.costs``).

    Usage comes from the ledger's sessions; without any (a local run with no ledger), from the
    ``gpu_instance_hours`` audit query. Unpriced types count their hours and are named in the notes, never guessed.
    """
    book = prices or costs.PriceBook(policy.lifecycle)
    notes: list[str] = []
    usage_items: list[Mapping[str, Any]] = list(items)
    source = "ledger"
    if not costs.sessions_of(items):
        from_audit = _sessions_from_audit(audit_hours, start)
        if from_audit:
            source = "cloudtrail"
            usage_items += from_audit
            notes.append("GPU-hours from CloudTrail launches and stops (the ledger holds no usage sessions)")
    by_team = costs.gpu_hours_and_cost(usage_items, start, end, "team", book)
    by_owner = costs.gpu_hours_and_cost(usage_items, start, end, "owner", book)
    by_type = costs.gpu_hours_and_cost(usage_items, start, end, "instance_type", book)
    unpriced = sorted(r.key for r in by_type if r.unpriced_sessions)
    if unpriced:
        notes.append(f"no price for {', '.join(unpriced)}: hours counted, dollars not")
    idle = costs.idle_hours(items, start, end)
    saved = costs.savings(items, start, end, book)
    if saved.unpriced_instances:
        notes.append(f"{saved.unpriced_instances} reclaimed instances have no price: their savings are not counted")
    types = {s.get("instance_id"): s.get("instance_type") for s in costs.sessions_of(items)}
    types.update({r.instance_id: r.instance_type for r in idle.instances if r.instance_type})
    return CostSection(
        source=source,
        gpu_hours_total=round(sum(r.gpu_hours for r in by_team), 2),
        cost_total_usd=round(sum(r.cost_usd for r in by_team), 2),
        by_team=_cost_table("gpu_hours_by_team", "GPU-hours by team", "team", by_team),
        by_owner=_cost_table("gpu_hours_by_owner", "GPU-hours by owner", "owner", by_owner),
        by_type=_cost_table("gpu_hours_by_type", "GPU-hours by instance type", "instance_type", by_type),
        idle_gpu_hours_detected=round(idle.detected_gpu_hours, 2),
        idle_gpu_hours_reclaimed=round(idle.reclaimed_gpu_hours, 2),
        idle_instances_detected=sum(1 for r in idle.instances if r.idle_hours > 0),
        idle_actions=sum(1 for r in idle.instances if r.reclaimed_hours > 0),
        savings_usd=round(saved.saved_usd, 2),
        idle_gpu_hours_would_reclaim=round(idle.would_reclaim_gpu_hours, 2),
        idle_would_act=sum(1 for r in idle.instances if r.would_reclaim_hours > 0),
        would_save_usd=round(saved.would_save_usd, 2),
        spot=spot_section(items, start, end),
        rightsizing=rightsizing(items, policy, start, end, {str(k): str(v) for k, v in types.items() if k and v}),
        prices_as_of=policy.lifecycle.prices_as_of.isoformat(),
        notes=notes,
    )


def spot_section(items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime) -> SpotStats:
    """Interruptions in the period (``domain.spot`` records), rebalance recommendations, and checkpoint delivery."""
    items = list(items)
    records = [
        i for i in items if i.get("kind") == spot.RECORD_KIND and _in(parse_time(i.get("warned_at")), start, end)
    ]
    stats = spot.interruption_stats(records)
    rebalances = {
        str(i.get("resource"))
        for i in items
        if i.get("kind", "decision") == "decision"
        and i.get("rule") == "spot-rebalance"
        and _in(parse_time(i.get("at")), start, end)
    }
    return SpotStats(
        interruptions=stats.total,
        rebalance_recommendations=len(rebalances),
        checkpoints_requested=stats.checkpoints_attempted,
        checkpoints_delivered=stats.checkpoints_delivered,
        checkpoints_succeeded=stats.checkpoints_succeeded,
        mean_age_hours=stats.mean_age_hours,
        by_pool=Table(
            name="spot_interruptions",
            title="Spot interruptions by week, instance type and zone",
            columns=["week", "instance_type", "zone", "interruptions"],
            rows=[p.model_dump() for p in stats.by_pool_week],
        ),
    )


def _in(at: dt.datetime | None, start: dt.datetime, end: dt.datetime) -> bool:
    return at is not None and start <= at < end


def rightsizing(
    items: Iterable[Mapping[str, Any]],
    policy: Policy,
    start: dt.datetime,
    end: dt.datetime,
    types: Mapping[str, str] | None = None,
) -> Table:
    """GPU instances whose busiest GPU never reached ``reports.rightsizing_max_utilization`` in the whole period.

    Each gets the cheapest priced type of the same family with enough GPUs for its peak, when there is one.
    """
    threshold = policy.reports.rightsizing_max_utilization
    rows = []
    for instance_id, points in utilisation_series(items, start, end).items():
        peak = max(v for _, v in points)
        if peak >= threshold:
            continue
        instance_type = (types or {}).get(instance_id, "")
        suggestion = _smaller_type(instance_type, peak, policy.lifecycle.prices)
        rows.append(
            {
                "instance_id": instance_id,
                "instance_type": instance_type or "unknown",
                "max_gpu_utilization": round(peak, 1),
                "samples": len(points),
                "suggestion": suggestion,
            }
        )
    rows.sort(key=lambda r: (r["max_gpu_utilization"], r["instance_id"]))
    return Table(
        name="rightsizing",
        title=f"Rightsizing: busiest GPU stayed under {threshold:g}% all period",
        columns=["instance_id", "instance_type", "max_gpu_utilization", "samples", "suggestion"],
        rows=rows,
    )


def _smaller_type(instance_type: str, peak: float, prices: Mapping[str, PriceEntry]) -> str:
    current = prices.get(instance_type)
    if current is None:
        return "stop when unused, or share the GPU between jobs"
    family = re.match(r"^([a-z]+\d+[a-z]*)\.", instance_type)
    needed = max(1, math.ceil(current.gpus * peak / 100))
    candidates = [
        (entry.on_demand, name)
        for name, entry in prices.items()
        if family
        and name.startswith(family.group(1) + ".")
        and entry.gpus >= needed
        and entry.on_demand < current.on_demand
    ]
    if not candidates:
        return "already the smallest priced size: stop when unused, or share the GPU"
    price, name = min(candidates)
    return f"{name} (saves ${current.on_demand - price:.2f}/hour)"


# --- assembly ------------------------------------------------------------------------------------------------------


def build_report(
    *,
    kind: ReportKind,
    start: dt.datetime,
    end: dt.datetime,
    policy: Policy,
    audit: Mapping[str, Mapping[str, Any]],
    previous_audit: Mapping[str, Mapping[str, Any]] | None = None,
    ledger_items: Sequence[Mapping[str, Any]] = (),
    descriptions: Mapping[str, str] | None = None,
    errors: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
    now: dt.datetime | None = None,
) -> Report:
    """Assemble the report; an empty period gives a report that says so, never an error."""
    generated = now or dt.datetime.now(dt.UTC)
    security = security_section(audit, previous_audit, policy.reports.top_rows, descriptions, errors)
    hours_rows = audit.get("gpu_instance_hours", {}).get("rows", [])
    cost = cost_section(ledger_items, policy, start, end, hours_rows)
    report = Report(
        kind=kind,
        start=start,
        end=end,
        generated_at=generated,
        security=security,
        cost=cost,
        utilisation=utilisation_series(ledger_items, start, end),
        notes=list(notes),
        dashboard_url=policy.notifications.dashboard_url,
        governor_tags=governor_tags_table(ledger_items, start, end),
    )
    if report.empty:
        report.notes.append("nothing happened in this period: no audit rows, no GPU usage, no utilisation samples")
    return report


def utilisation_widget(region: str, start: dt.datetime, end: dt.datetime, threshold: float) -> dict[str, Any]:
    """A CloudWatch metric widget for ``GetMetricWidgetImage``: every instance's busiest GPU, hourly maximum."""
    period = 3600 if (end - start) > dt.timedelta(days=1) else 300
    return {
        "title": "Fleet GPU utilisation (busiest GPU per instance)",
        "view": "timeSeries",
        "region": region,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "width": 900,
        "height": 360,
        "stat": "Maximum",
        "period": period,
        "yAxis": {"left": {"min": 0, "max": 100, "label": "%", "showUnits": False}},
        "metrics": [
            [
                {
                    "expression": (
                        "SEARCH('{CWAgent,InstanceId} MetricName=\"nvidia_smi_utilization_gpu\"', "
                        f"'Maximum', {period})"
                    ),
                    "id": "e1",
                    "label": "",
                }
            ]
        ],
        "annotations": {"horizontal": [{"label": "rightsizing threshold", "value": threshold}]},
    }


# --- renderings ----------------------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def _period_text(report: Report) -> str:
    return f"{report.start:%Y-%m-%d %H:%M} to {report.end:%Y-%m-%d %H:%M} UTC"


def title(report: Report) -> str:
    return f"GPU Fleet Governor {report.kind} report, {report.start:%Y-%m-%d}" + (
        f" to {(report.end - dt.timedelta(seconds=1)):%Y-%m-%d}"
        if report.end - report.start > dt.timedelta(days=1)
        else ""
    )


def csv_files(report: Report, audit: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, str]:
    """Every table as CSV: the full rows of each audit query (not only the top rows) and each cost table."""
    files: dict[str, str] = {}
    for summary in report.security:
        rows = list((audit or {}).get(summary.name, {}).get("rows", summary.top_rows))
        files[f"security_{summary.name}.csv"] = _csv(_columns(rows) or summary.columns, rows)
    for table in report.tables():
        files[f"{table.name}.csv"] = _csv(table.columns, table.rows)
    return files


def _csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_safe(_plain_value(v)) for k, v in row.items()})
    return buffer.getvalue()


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> Any:
    """OWASP's CSV-injection rule: a text cell starting with = + - @ tab or CR gets a leading ``'``.

    CloudTrail values (``userAgent``, ``errorMessage``, user names) are chosen by whoever made the call, and a failed
    console login is enough to plant ``=HYPERLINK(...)`` in a spreadsheet the security team opens. Numbers stay numbers.
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _plain_value(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, list | dict):
        import json

        return json.dumps(value, default=str)
    return value


_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#111827;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:2px solid #e5e7eb}
h3{font-size:15px;margin:18px 0 6px}.muted{color:#6b7280}.tiles{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.tile{border:1px solid #e5e7eb;border-radius:8px;padding:10px 14px;min-width:150px;background:#f9fafb}
.tile b{display:block;font-size:22px}table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #e5e7eb;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f4f6}
.up{color:#dc2626}.down{color:#059669}.zero{color:#6b7280}.note{background:#fef3c7;padding:6px 10px;border-radius:6px}
.wide{overflow-x:auto;max-width:100%}img{max-width:100%;border:1px solid #e5e7eb;border-radius:8px}
"""


def _html_table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "<p class='muted'>none</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(_plain_value(row.get(c))))}</td>" for c in columns) + "</tr>"
        for row in rows
    )
    return f"<div class='wide'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def would_reclaim_text(cost: CostSection) -> str:
    """The report-only idle policy's value in one phrase, the same words in HTML, Slack, email and the demo summary."""
    return (
        f"would stop {cost.idle_would_act} instance(s), would reclaim {cost.idle_gpu_hours_would_reclaim:,.1f} "
        f"GPU-hours, ${cost.would_save_usd:,.2f}"
    )


def render_html(report: Report, chart_src: str | None = None) -> str:
    """A self-contained page (inline CSS); the chart is ``chart_src``: a file name, ``cid:...`` or a data URI."""
    cost = report.cost
    tiles = [
        ("security findings", str(sum(q.count for q in report.security))),
        ("GPU-hours", f"{cost.gpu_hours_total:,.1f}"),
        ("estimated cost", f"${cost.cost_total_usd:,.2f}"),
        ("idle GPU-hours detected", f"{cost.idle_gpu_hours_detected:,.1f}"),
        ("idle GPU-hours reclaimed", f"{cost.idle_gpu_hours_reclaimed:,.1f}"),
        ("estimated savings", f"${cost.savings_usd:,.2f}"),
        *(
            [
                ("idle GPU-hours would reclaim (report-only)", f"{cost.idle_gpu_hours_would_reclaim:,.1f}"),
                ("would save (report-only)", f"${cost.would_save_usd:,.2f}"),
            ]
            if cost.idle_would_act
            else []
        ),
        ("Spot interruptions", str(cost.spot.interruptions)),
    ]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title(report))}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title(report))}</h1>",
        f"<p class='muted'>Period {html.escape(_period_text(report))} · generated "
        f"{report.generated_at:%Y-%m-%d %H:%M} UTC</p>",
        "<div class='tiles'>"
        + "".join(f"<div class='tile'><b>{html.escape(v)}</b>{html.escape(k)}</div>" for k, v in tiles)
        + "</div>",
    ]
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in report.notes]
    if chart_src:
        parts.append("<h2>Fleet GPU utilisation</h2>")
        parts.append(f"<img src='{html.escape(chart_src)}' alt='Fleet GPU utilisation (busiest GPU per instance)'>")
    parts.append("<h2>Security</h2>")
    overview = [
        {"query": q.name, "rows": q.count, "change": q.change_text(), "about": q.error or q.description}
        for q in report.security
    ]
    parts.append(_html_table(["query", "rows", "change", "about"], overview))
    parts.append("<h2>Cost</h2>")
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in cost.notes]
    parts.append(
        f"<p>Idle: {cost.idle_gpu_hours_detected:,.1f} GPU-hours detected on "
        f"{cost.idle_instances_detected} instance(s), "
        f"{cost.idle_actions} stopped or terminated, {cost.idle_gpu_hours_reclaimed:,.1f} GPU-hours reclaimed, "
        f"${cost.savings_usd:,.2f} saved (on-demand prices as of {html.escape(cost.prices_as_of)}).</p>"
    )
    if cost.idle_would_act:
        parts.append(f"<p>Report-only idle policy: {html.escape(would_reclaim_text(cost))} if enforced.</p>")
    stats = cost.spot
    parts.append(
        f"<p>Spot: {stats.interruptions} interruptions, {stats.rebalance_recommendations} rebalance recommendations; "
        f"checkpoints {stats.checkpoints_delivered} delivered of {stats.checkpoints_requested} sent, "
        f"{stats.checkpoints_succeeded} finished successfully.</p>"
    )
    for table in report.tables():
        parts.append(f"<h3>{html.escape(table.title)}</h3>")
        parts.append(_html_table(table.columns, table.rows))
    if any(q.count for q in report.security):
        parts.append("<h2>Security details</h2>")
    for query in report.security:
        if not query.count:
            continue
        shown = len(query.top_rows)
        parts.append(
            f"<h3>{html.escape(query.name)} <span class='muted'>({query.count} rows, "
            f"{html.escape(query.change_text())}; first {shown} shown, all in "
            f"security_{html.escape(query.name)}.csv)</span></h3>"
        )
        parts.append(_html_table(query.columns, query.top_rows))
    if report.dashboard_url:
        url = html.escape(report.dashboard_url)
        parts.append(f"<p><a href='{url}'>CloudWatch dashboard</a></p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _row_line(row: Mapping[str, Any], columns: Sequence[str]) -> str:
    cells = [f"{c}={_cell(_plain_value(row.get(c)))}" for c in columns[:6] if row.get(c) not in (None, "")]
    return "• " + escape_mrkdwn(", ".join(cells))


def slack_messages(report: Report, rows_per_query: int = 3) -> list[Message]:
    """The report as Block Kit messages within Slack's limits; the chart is a link to the dashboard."""
    cost = report.cost
    summary = [
        f"*Period* {_period_text(report)}",
        f"*Security* {sum(q.count for q in report.security)} rows across "
        f"{sum(1 for q in report.security if q.count)} of {len(report.security)} queries",
        f"*GPU-hours* {cost.gpu_hours_total:,.1f} (${cost.cost_total_usd:,.2f})   "
        f"*Idle* {cost.idle_gpu_hours_detected:,.1f} GPU-h detected, {cost.idle_gpu_hours_reclaimed:,.1f} reclaimed, "
        f"${cost.savings_usd:,.2f} saved"
        + (f"; report-only: {would_reclaim_text(cost)}" if cost.idle_would_act else ""),
        f"*Spot* {cost.spot.interruptions} interruptions, {cost.spot.checkpoints_delivered}/"
        f"{cost.spot.checkpoints_requested} checkpoints delivered",
    ]
    groups: list[list[dict[str, Any]]] = [section("\n".join(summary))]
    if report.notes:
        groups.append(section("\n".join(f"_{escape_mrkdwn(n)}_" for n in report.notes)))
    if report.dashboard_url:
        groups.append(section(f"<{report.dashboard_url}|Fleet GPU utilisation on the CloudWatch dashboard>"))
    groups.append([header("Security")])
    for query in report.security:
        if not query.count and not query.error:
            continue
        lines = [f"*{escape_mrkdwn(query.name)}*: {query.count} rows ({query.change_text()})"]
        if query.error:
            lines.append(f"_failed: {escape_mrkdwn(query.error)}_")
        lines += [_row_line(row, query.columns) for row in query.top_rows[:rows_per_query]]
        groups.append(section("\n".join(lines)))
    quiet = [q.name for q in report.security if not q.count and not q.error]
    if quiet:
        groups.append([context(escape_mrkdwn("no rows: " + ", ".join(quiet)))])
    groups.append([header("Cost")])
    for table in report.tables():
        lines = [f"*{escape_mrkdwn(table.title)}*"]
        lines += [_row_line(row, table.columns) for row in table.rows[:10]] or ["none"]
        if len(table.rows) > 10:
            lines.append(f"_and {len(table.rows) - 10} more in {table.name}.csv_")
        groups.append(section("\n".join(lines)))
    return pack_messages(groups, title(report), header(title(report)))


def render_text(report: Report) -> str:
    """The plain-text alternative of the email (and the command's summary)."""
    cost = report.cost
    lines = [title(report), f"Period {_period_text(report)}", ""]
    lines += list(report.notes)
    lines.append("Security")
    for query in report.security:
        lines.append(f"  {query.name}: {query.count} rows ({query.change_text()})")
    lines += [
        "",
        "Cost",
        f"  GPU-hours {cost.gpu_hours_total:,.1f}, estimated cost ${cost.cost_total_usd:,.2f}",
        f"  idle GPU-hours detected {cost.idle_gpu_hours_detected:,.1f}, reclaimed {cost.idle_gpu_hours_reclaimed:,.1f}"
        f", savings ${cost.savings_usd:,.2f}",
        *([f"  report-only: {would_reclaim_text(cost)} if enforced"] if cost.idle_would_act else []),
        f"  Spot interruptions {cost.spot.interruptions}, checkpoints delivered {cost.spot.checkpoints_delivered}"
        f"/{cost.spot.checkpoints_requested}",
        f"  rightsizing candidates {len(cost.rightsizing.rows)}",
        "",
        "Every table is attached as CSV.",
    ]
    return "\n".join(lines) + "\n"
