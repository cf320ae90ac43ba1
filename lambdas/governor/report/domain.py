"""The scheduled security and cost report: its model, built from plain data, and its renderings.

Inputs are plain data so the same code serves the Lambda (Athena results, DynamoDB ledger) and ``governor report``
(DuckDB results, an exported ledger file): audit results ``{query: {"count", "rows"}}`` for this period and the
previous one, and ledger items (decisions and keyed items) as dictionaries. Outputs: HTML, Slack messages, CSVs, JSON.

The order is the one a reader acts in: what needs attention now (the governor's open findings), then money (spend,
idle spend, reclaimed or would-reclaim, budgets, by team), then trends, then the audit activity (CIS monitoring
queries), which counts API calls worth a look and is kept apart from findings.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from governor.domain import costs
from governor.domain.escape import csv_cell
from governor.domain.identity import normalise_owner
from governor.domain.model import Model
from governor.domain.times import parse_time
from governor.notifier.messages import (
    MAX_BLOCKS,
    MAX_FALLBACK_CHARS,
    MAX_HEADER_CHARS,
    Message,
    escape_mrkdwn,
    split_text,
)
from governor.policy import Policy, PriceEntry
from governor.report import charts as charting
from governor.spot import records as interruptions

ReportKind = Literal["daily", "weekly", "custom"]
RESERVED_QUERIES = {"gpu_instance_hours"}
OFFENDER_COLUMNS = (
    "instance_id",
    "owner",
    "team",
    "instance_type",
    "idle_gpu_hours",
    "idle_usd",
    "reclaimed_usd",
    "would_reclaim_usd",
)
FINDING_COLUMNS = (
    "severity",
    "status",
    "summary",
    "resource",
    "owner",
    "team",
    "first_seen",
    "last_seen",
    "remediation",
    "resolution",
    "policy",
    "rule",
)
TREND_PERIODS = 8
# Rows of open (and of resolved) findings shown in the HTML; findings.csv has them all.
FINDING_ROWS = 25
UTILISATION_KEYS = ("max_gpu_utilization", "gpu_utilization_max", "max_utilization")


# --- model ---------------------------------------------------------------------------------------------------------


class Table(Model):
    """A table shown in the report and attached in full as CSV."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]] = Field(default_factory=list)


class QuerySummary(Model):
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
        """The change since the previous period; says so plainly when there is no previous period to compare."""
        change = self.change
        if change is None:
            return "no previous period"
        if change == 0:
            return "unchanged"
        return f"{change:+,d} vs previous period"


class FindingRow(Model):
    """One of the governor's own findings (a warning or critical decision) with where it stands at the period's end."""

    policy: str
    rule: str
    severity: Literal["warning", "critical"]
    resource: str
    summary: str
    owner: str = "unknown"
    team: str = "unknown"
    first_seen: dt.datetime
    last_seen: dt.datetime
    status: Literal["open", "resolved"]
    resolution: str = ""
    remediation: str = ""
    enforced: bool = False


BUDGET_COLUMNS = ("budget_usd", "spent_usd", "spent_percent", "burn_per_day_usd", "forecast_usd")


class BudgetRow(Model):
    """A team's (or an account's) monthly budget against its spend so far this month, with the month-end forecast at
    today's burn. ``team`` holds the budget's name: the team tag's value, or the account id when ``scope`` is
    ``account``."""

    team: str
    budget_usd: float
    spent_usd: float
    days_elapsed: float
    days_in_month: int
    burn_per_day_usd: float
    forecast_usd: float
    scope: Literal["team", "account"] = "team"

    @property
    def label(self) -> str:
        """How a sentence names the budget: the team, or "account 111122223333"."""
        return f"account {self.team}" if self.scope == "account" else self.team

    @property
    def spent_percent(self) -> float:
        return 100.0 * self.spent_usd / self.budget_usd

    @property
    def forecast_percent(self) -> float:
        return 100.0 * self.forecast_usd / self.budget_usd


class TrendPoint(Model):
    """The headline figures of one report, archived as ``summary.json`` so later reports can draw trends."""

    kind: str
    start: dt.datetime
    end: dt.datetime
    spend_usd: float
    idle_usd: float
    gpu_hours: float
    reclaimed_usd: float = 0.0
    would_reclaim_usd: float = 0.0
    open_critical: int = 0
    open_warning: int = 0
    audit_events: int = 0


class SpotStats(Model):
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


class CostSection(Model):
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
    idle_cost_usd: float = 0.0
    would_reclaim_gpu_hours: float = 0.0
    would_save_usd: float = 0.0
    idle_enforced: bool = False
    # Report-only idle policy: how many stop/terminate decisions it made that enforcing would have carried out.
    idle_would_act: int = 0
    #: The same, per team (``team_view``): GPU-hours report-only stops would have given back.
    would_reclaim_gpu_hours_by_team: dict[str, float] = Field(default_factory=dict)
    offenders: Table = Field(
        default_factory=lambda: Table(name="idle_offenders", title="Top idle offenders", columns=list(OFFENDER_COLUMNS))
    )
    spot: SpotStats = Field(default_factory=SpotStats)
    rightsizing: Table
    prices_as_of: str = ""
    notes: list[str] = Field(default_factory=list)
    #: Spend and idle figures per account and region (organisation mode); None while the ledger names one only.
    by_account: Table | None = None


GOVERNOR_TAGS_TITLE = "Exemptions, snoozes and checkpoint names, by who set them"
GOVERNOR_TAGS_COLUMNS = ("who", "resource_id", "key", "value", "at", "honoured")


class Report(Model):
    """Everything one report says; rendered to HTML, Slack, CSV and archived as JSON."""

    kind: ReportKind
    start: dt.datetime
    end: dt.datetime
    generated_at: dt.datetime
    security: list[QuerySummary]
    cost: CostSection
    findings: list[FindingRow] = Field(default_factory=list)
    budgets: list[BudgetRow] = Field(default_factory=list)
    trends: list[TrendPoint] = Field(default_factory=list)
    charts: charting.FleetCharts = Field(default_factory=charting.FleetCharts)
    utilisation: dict[str, list[tuple[dt.datetime, float]]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    dashboard_url: str | None = None
    report_url: str | None = None
    report_url_expires: dt.datetime | None = None
    chart_file: str = "chart.png"
    #: The team a per-team digest is for (``team_view``); None for the fleet report.
    audience: str | None = None
    governor_tags: Table = Field(
        default_factory=lambda: Table(
            name="governor_tags", title=GOVERNOR_TAGS_TITLE, columns=list(GOVERNOR_TAGS_COLUMNS)
        )
    )

    @property
    def empty(self) -> bool:
        return (
            not any(q.count for q in self.security)
            and self.cost.gpu_hours_total == 0
            and not self.utilisation
            and not self.findings
        )

    @property
    def open_findings(self) -> list[FindingRow]:
        return [f for f in self.findings if f.status == "open"]

    @property
    def previous(self) -> TrendPoint | None:
        """The report of the period just before this one, when its summary was archived."""
        return next((t for t in reversed(self.trends) if t.end == self.start and t.kind == self.kind), None)

    def tables(self) -> list[Table]:
        cost = self.cost
        return [
            *([cost.by_account] if cost.by_account is not None else []),
            cost.by_team,
            cost.by_owner,
            cost.by_type,
            cost.offenders,
            cost.spot.by_pool,
            cost.rightsizing,
            self.governor_tags,
        ]

    def findings_table(self) -> Table:
        return Table(
            name="findings",
            title="Findings",
            columns=list(FINDING_COLUMNS),
            rows=[f.model_dump(mode="json", include=set(FINDING_COLUMNS)) for f in self.findings],
        )

    def budgets_table(self) -> Table:
        scoped = any(b.scope == "account" for b in self.budgets)  # "scope" and "name" only beside account budgets
        key = "name" if scoped else "team"
        return Table(
            name="budgets",
            title="Monthly budgets",
            columns=[*(["scope"] if scoped else []), key, *BUDGET_COLUMNS],
            rows=[
                {
                    **({"scope": b.scope} if scoped else {}),
                    key: b.team,
                    "budget_usd": round(b.budget_usd, 2),
                    "spent_usd": round(b.spent_usd, 2),
                    "spent_percent": round(b.spent_percent, 1),
                    "burn_per_day_usd": round(b.burn_per_day_usd, 2),
                    "forecast_usd": round(b.forecast_usd, 2),
                }
                for b in self.budgets
            ],
        )

    def trend_point(self) -> TrendPoint:
        """This report's headline figures, for the trend of the reports that follow it."""
        return TrendPoint(
            kind=self.kind,
            start=self.start,
            end=self.end,
            spend_usd=self.cost.cost_total_usd,
            idle_usd=self.cost.idle_cost_usd,
            gpu_hours=self.cost.gpu_hours_total,
            reclaimed_usd=self.cost.savings_usd,
            would_reclaim_usd=self.cost.would_save_usd,
            open_critical=sum(1 for f in self.open_findings if f.severity == "critical"),
            open_warning=sum(1 for f in self.open_findings if f.severity == "warning"),
            audit_events=sum(q.count for q in self.security),
        )


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


def _cost_table(
    name: str, title: str, key: str, rows: Sequence[costs.CostRow], idle: Mapping[str, float] | None = None
) -> Table:
    """A cost table; with ``idle`` (dollars per key) it also says how much of each row's spend was idle."""
    columns = [key, "sessions", "instance_hours", "gpu_hours", "cost_usd"] + (["idle_usd"] if idle is not None else [])
    return Table(
        name=name,
        title=title,
        columns=columns,
        rows=[
            {
                key: row.key,
                "sessions": row.sessions,
                "instance_hours": round(row.instance_hours, 2),
                "gpu_hours": round(row.gpu_hours, 2),
                "cost_usd": round(row.cost_usd, 2),
                **({"idle_usd": round(idle.get(row.key, 0.0), 2)} if idle is not None else {}),
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
        notes.append(
            f"{_plural(saved.unpriced_instances, 'reclaimed instance')} without a price: their savings are not counted"
        )
    offenders = costs.idle_offenders(items, start, end, book)
    idle_by_team: dict[str, float] = defaultdict(float)
    idle_by_owner: dict[str, float] = defaultdict(float)
    for offender in offenders:
        idle_by_team[offender.team] += offender.idle_usd
        idle_by_owner[offender.owner] += offender.idle_usd
    types = {s.get("instance_id"): s.get("instance_type") for s in costs.sessions_of(items)}
    types.update({r.instance_id: r.instance_type for r in idle.instances if r.instance_type})
    return CostSection(
        source=source,
        gpu_hours_total=round(sum(r.gpu_hours for r in by_team), 2),
        cost_total_usd=round(sum(r.cost_usd for r in by_team), 2),
        by_team=_cost_table("gpu_hours_by_team", "Spend by team", "team", by_team, idle_by_team),
        by_owner=_cost_table("gpu_hours_by_owner", "Spend by owner", "owner", by_owner, idle_by_owner),
        by_type=_cost_table("gpu_hours_by_type", "Spend by instance type", "instance_type", by_type),
        idle_cost_usd=round(sum(o.idle_usd for o in offenders), 2),
        would_reclaim_gpu_hours=round(sum(r.would_reclaim_gpu_hours for r in idle.instances), 2),
        would_save_usd=round(sum(o.would_reclaim_usd for o in offenders), 2),
        idle_enforced=_idle_enforced(items, policy),
        offenders=Table(
            name="idle_offenders",
            title="Top idle offenders",
            columns=list(OFFENDER_COLUMNS),
            rows=[{c: getattr(o, c) for c in OFFENDER_COLUMNS} for o in offenders],
        ),
        idle_gpu_hours_detected=round(idle.detected_gpu_hours, 2),
        idle_gpu_hours_reclaimed=round(idle.reclaimed_gpu_hours, 2),
        idle_instances_detected=sum(1 for r in idle.instances if r.idle_hours > 0),
        idle_actions=sum(1 for r in idle.instances if r.reclaimed_hours > 0),
        savings_usd=round(saved.saved_usd, 2),
        idle_would_act=sum(1 for r in idle.instances if r.would_reclaim_hours > 0),
        would_reclaim_gpu_hours_by_team=_would_by_team(idle.instances, offenders),
        spot=spot_section(items, start, end),
        rightsizing=rightsizing(items, policy, start, end, {str(k): str(v) for k, v in types.items() if k and v}),
        prices_as_of=policy.lifecycle.prices_as_of.isoformat(),
        notes=notes,
        by_account=account_table(items, usage_items, idle.instances, offenders, start, end, book),
    )


# --- organisation: accounts and regions ----------------------------------------------------------------------------

UNKNOWN_ORIGIN = ("unknown", "unknown")
ACCOUNT_COLUMNS = (
    "account",
    "region",
    "sessions",
    "gpu_hours",
    "cost_usd",
    "idle_gpu_hours",
    "idle_usd",
    "would_reclaim_gpu_hours",
    "would_save_usd",
    "reclaimed_gpu_hours",
    "decisions_to_act",
)


def origins(items: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """Resource id -> (account, region) from the decisions the runner stamped with their event's origin.

    For keyed items written without their own stamp (usage sessions recorded before sessions carried ``account``, other
    items keyed by instance id): an instance's decisions say where it lives, and instance ids are unique across
    accounts and regions.
    """
    found: dict[str, tuple[str, str]] = {}
    for item in items:
        if item.get("kind", "decision") != "decision":
            continue
        account, resource = item.get("account"), item.get("resource")
        if isinstance(account, str) and account and isinstance(resource, str) and resource:
            found.setdefault(resource, (account, str(item.get("region") or "unknown")))
    return found


def origin_of(item: Mapping[str, Any], known: Mapping[str, tuple[str, str]]) -> tuple[str, str]:
    """Where one ledger item comes from: its own stamp, else its instance's or resource's, else unknown."""
    account = item.get("account")
    if isinstance(account, str) and account:
        return account, str(item.get("region") or "unknown")
    for key in ("instance_id", "resource"):
        value = item.get(key)
        if isinstance(value, str) and value in known:
            return known[value]
    return UNKNOWN_ORIGIN


def account_table(
    items: Sequence[Mapping[str, Any]],
    usage_items: Sequence[Mapping[str, Any]],
    idle_rows: Iterable[costs.IdleRow],
    offenders: Iterable[costs.OffenderRow],
    start: dt.datetime,
    end: dt.datetime,
    prices: costs.PriceBook,
) -> Table | None:
    """Spend, idle and would-reclaim figures per account and region, or None while the ledger names at most one
    (a single-account deployment's report stays as it was). The rows add up to the report's totals."""
    known = origins(items)
    seen = {origin_of(item, known) for item in items if item.get("kind", "decision") == "decision"}
    seen |= {origin_of(s, known) for s in costs.sessions_of(usage_items)}
    if len(seen - {UNKNOWN_ORIGIN}) < 2:
        return None
    # costs groups by team, owner or type: the same sessions, their team replaced by where they ran.
    relabelled = [{**s, "team": "/".join(origin_of(s, known))} for s in costs.sessions_of(usage_items)]
    rows: dict[tuple[str, str], dict[str, Any]] = {}

    def row(origin: tuple[str, str]) -> dict[str, Any]:
        return rows.setdefault(
            origin, {"account": origin[0], "region": origin[1], **dict.fromkeys(ACCOUNT_COLUMNS[2:], 0.0)}
        )

    for cost_row in costs.gpu_hours_and_cost(relabelled, start, end, "team", prices):
        account, _, region = cost_row.key.partition("/")
        target = row((account, region))
        target["sessions"] += cost_row.sessions
        target["gpu_hours"] += cost_row.gpu_hours
        target["cost_usd"] += cost_row.cost_usd
    for idle_row in idle_rows:
        target = row(known.get(idle_row.instance_id, UNKNOWN_ORIGIN))
        target["idle_gpu_hours"] += idle_row.idle_gpu_hours
        target["would_reclaim_gpu_hours"] += idle_row.would_reclaim_gpu_hours
        target["reclaimed_gpu_hours"] += idle_row.reclaimed_gpu_hours
    for offender in offenders:
        target = row(known.get(offender.instance_id, UNKNOWN_ORIGIN))
        target["idle_usd"] += offender.idle_usd
        target["would_save_usd"] += offender.would_reclaim_usd
    for item in items:
        if item.get("kind", "decision") == "decision" and item.get("verdict") == "act" and _in_period(item, start, end):
            row(origin_of(item, known))["decisions_to_act"] += 1
    for values in rows.values():
        values["sessions"] = int(values["sessions"])
        values["decisions_to_act"] = int(values["decisions_to_act"])
        for column in ACCOUNT_COLUMNS[3:-1]:
            values[column] = round(values[column], 2)
    return Table(
        name="gpu_hours_by_account",
        title="Spend by account and region",
        columns=list(ACCOUNT_COLUMNS),
        rows=[rows[k] for k in sorted(rows, key=lambda k: (k == UNKNOWN_ORIGIN, k))],
    )


def _in_period(item: Mapping[str, Any], start: dt.datetime, end: dt.datetime) -> bool:
    at = parse_time(item.get("at"))
    return at is None or start <= at < end


def _would_by_team(rows: Iterable[costs.IdleRow], offenders: Iterable[costs.OffenderRow]) -> dict[str, float]:
    teams = {o.instance_id: o.team for o in offenders}
    found: dict[str, float] = defaultdict(float)
    for row in rows:
        if row.would_reclaim_gpu_hours > 0:
            found[teams.get(row.instance_id, "unknown")] += row.would_reclaim_gpu_hours
    return {team: round(hours, 2) for team, hours in sorted(found.items())}


def _idle_enforced(items: Iterable[Mapping[str, Any]], policy: Policy) -> bool:
    """Whether idle stops were really done: the latest idle stop/terminate decision says; without one, the policy.

    The ledger is the better witness (the report function's environment carries no idle section, and a policy
    switched on mid-period should not relabel what was report-only).
    """
    latest: tuple[str, bool] | None = None
    for item in items:
        if item.get("kind", "decision") != "decision" or item.get("policy") != "idle":
            continue
        for action in item.get("actions") or []:
            if isinstance(action, Mapping) and action.get("type") in costs.RECLAIM_ACTIONS:
                stamp = str(item.get("at", ""))
                if latest is None or stamp >= latest[0]:
                    latest = (stamp, bool(action.get("enforced")))
    return latest[1] if latest is not None else policy.idle.enforce


def spot_section(items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime) -> SpotStats:
    """Interruptions in the period (``domain.spot`` records), rebalance recommendations, and checkpoint delivery."""
    items = list(items)
    records = [
        i
        for i in items
        if i.get("kind") == interruptions.RECORD_KIND and _in(parse_time(i.get("warned_at")), start, end)
    ]
    stats = interruptions.interruption_stats(records)
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


# --- findings ------------------------------------------------------------------------------------------------------

# Actions that fix the problem by themselves when done; warn / notify / record / tag only tell someone.
FIXING_ACTIONS = frozenset(
    {
        "stop",
        "terminate",
        "revoke_ingress",
        "remove_public_ip",
        "enable_key_rotation",
        "rotate_key",
        "deactivate_access_key",
        "set_secret_rotation",
        "replace",
        "checkpoint",
    }
)


def remediation(policy_name: str, rule: str, policy: Policy) -> str:
    """One sentence: what a person does about a finding of this policy and rule (with the exact tag to set)."""
    fleet = policy.fleet
    if policy_name == "idle":
        return (
            "Stop the instance if nobody needs it; to keep it, tag it "
            f"{fleet.keep_until_tag}=<ISO 8601 time> (snooze) or {fleet.exempt_tag}=true."
        )
    if policy_name == "network":
        if "public" in rule:
            return "Launch it without a public IP (or put it behind a load balancer), or exempt it in governor.yaml."
        return "Remove the world-open ingress rule, or list the group under network exemptions in governor.yaml."
    if policy_name == "keys":
        if "secret" in rule:
            return "Turn on the secret's rotation with an interval within keys.max_secret_rotation_days."
        if "access" in rule:
            return "Rotate the IAM access key (create a new one, switch, then deactivate the old one)."
        return "Enable automatic rotation on the KMS key (every 90 days or less)."
    if policy_name == "lifecycle":
        return f"Tag the instance with {fleet.owner_tag} and {fleet.team_tag} so its cost is charged to a team."
    if policy_name == "spot":
        return "Check that the job's checkpoint finished and resume it on a new instance."
    if policy_name == "budgets":
        return "Stop idle instances of the team, or raise its budget under budgets.teams in governor.yaml."
    if policy_name == "reports":
        return "Read the query's failure reason; this report lacks that query's figures until it runs."
    return "See the decision's reasons in the ledger (governor ledger export)."


def _owner_of(decision: Mapping[str, Any], sessions: Mapping[str, list[Mapping[str, Any]]]) -> tuple[str, str]:
    evidence = decision.get("evidence") or {}
    owner = evidence.get("owner")
    team = evidence.get("team")
    for action in decision.get("actions") or []:
        if isinstance(action, Mapping):
            owner = owner or action.get("owner")
    own = sessions.get(str(decision.get("resource")), [])
    if own:
        latest = max(own, key=lambda s: str(s.get("start", "")))
        owner = owner or latest.get("owner")
        team = team or latest.get("team")
    return normalise_owner(owner), str(team or "unknown")


def _resolves(decision: Mapping[str, Any]) -> bool:
    """A later info-level decision that says the problem is gone (an idle instance still idle does not)."""
    if decision.get("severity", "info") != "info" or decision.get("verdict") not in ("ok", "ignored"):
        return False
    status = (decision.get("evidence") or {}).get("status")
    return not (decision.get("policy") == "idle" and status in costs.IDLE_STATUSES)


def _fixed(decision: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        a
        for a in decision.get("actions") or []
        if isinstance(a, Mapping) and a.get("type") in FIXING_ACTIONS and a.get("enforced")
    ]


def findings_section(
    items: Iterable[Mapping[str, Any]], policy: Policy, start: dt.datetime, end: dt.datetime
) -> list[FindingRow]:
    """The governor's warning and critical decisions, one row per policy and resource, as they stand at ``end``.

    A finding opens with a warning or critical decision and is resolved when that decision did a fixing action (a
    stop, a revoke...) or a later info-level decision about the same policy and resource found the problem gone
    (busy again, compliant, exempted, snoozed); a new warning after that opens it again. Findings resolved before
    the period are left out; open ones are shown however old. Open first, critical first, oldest first.
    """
    items = list(items)
    sessions: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for session in costs.sessions_of(items):
        sessions[str(session.get("instance_id"))].append(session)
    history: dict[tuple[str, str], list[tuple[dt.datetime, Mapping[str, Any]]]] = defaultdict(list)
    for item in items:
        if item.get("kind", "decision") != "decision" or item.get("policy") in (None, "notifications", "reports"):
            continue
        at = parse_time(item.get("at"))
        if at is None or at >= end:
            continue
        history[(str(item["policy"]), str(item.get("resource")))].append((at, item))
    rows: list[FindingRow] = []
    for (policy_name, resource), entries in history.items():
        entries.sort(key=lambda e: e[0])
        episode: list[tuple[dt.datetime, Mapping[str, Any]]] = []
        closed: tuple[list[tuple[dt.datetime, Mapping[str, Any]]], dt.datetime, str] | None = None
        for at, decision in entries:
            if decision.get("severity") in ("warning", "critical"):
                episode.append((at, decision))
                fixed = _fixed(decision)
                if fixed:
                    closed = (episode, at, f"{_done_phrase(str(fixed[0].get('type')))} by the governor")
                    episode = []
            elif episode and _resolves(decision):
                reason = next(iter(decision.get("reasons") or []), "") or "no longer flagged"
                closed = (episode, at, _sentence(str(reason)))
                episode = []
        if episode:
            flagged, status, resolution = episode, "open", ""
        elif closed is not None and closed[1] >= start:
            flagged, status, resolution = closed[0], "resolved", closed[2]
        else:
            continue
        first_at = flagged[0][0]
        last_at, last = flagged[-1]
        severity = "critical" if any(d.get("severity") == "critical" for _, d in flagged) else "warning"
        owner, team = _owner_of(last, sessions)
        reasons = [str(r) for r in last.get("reasons") or []]
        rule = str(last.get("rule") or policy_name)
        rows.append(
            FindingRow(
                policy=policy_name,
                rule=rule,
                severity=severity,
                resource=resource,
                summary=_sentence(reasons[0]) if reasons else rule,
                owner=owner,
                team=team,
                first_seen=first_at,
                last_seen=last_at,
                status=status,
                resolution=resolution,
                remediation=remediation(policy_name, rule, policy),
                enforced=any(isinstance(a, Mapping) and a.get("enforced") for a in last.get("actions") or []),
            )
        )
    rows.sort(key=lambda f: (f.status != "open", f.severity != "critical", f.first_seen, f.resource))
    return rows


def _done_phrase(action: str) -> str:
    return {
        "stop": "stopped",
        "terminate": "terminated",
        "revoke_ingress": "ingress revoked",
        "remove_public_ip": "public IP removed",
        "enable_key_rotation": "rotation enabled",
        "rotate_key": "key rotated",
        "deactivate_access_key": "access key deactivated",
        "set_secret_rotation": "secret rotation set",
        "replace": "replaced",
        "checkpoint": "checkpoint sent",
    }.get(action, action.replace("_", " ") + " done")


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:]) if text else text


# --- budgets -------------------------------------------------------------------------------------------------------


def month_bounds(moment: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The UTC month holding ``moment``; a report ending at midnight on the 1st belongs to the month before."""
    at = moment.astimezone(dt.UTC) - dt.timedelta(microseconds=1)
    first = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (first + dt.timedelta(days=32)).replace(day=1)
    return first, following


def budget_section(
    items: Sequence[Mapping[str, Any]], policy: Policy, as_of: dt.datetime, prices: costs.PriceBook | None = None
) -> list[BudgetRow]:
    """Each budgeted team's and account's spend from the 1st of the month to ``as_of``, burn per day and month-end
    forecast (an account's sessions are placed by ``origins``).

    The forecast is the straight line of this month's burn: spend so far / days elapsed x days in the month.
    """
    budgets = policy.budgets.teams
    by_account = policy.budgets.accounts
    if not budgets and not by_account:
        return []
    first, following = month_bounds(as_of)
    until = min(as_of, following)
    spent = {r.key: r.cost_usd for r in costs.gpu_hours_and_cost(items, first, until, "team", prices)}
    spent_by_account: dict[str, float] = {}
    if by_account:
        known = origins(items)
        relabelled = [{**s, "team": origin_of(s, known)[0]} for s in costs.sessions_of(items)]
        by_origin = costs.gpu_hours_and_cost(relabelled, first, until, "team", prices)
        spent_by_account = {r.key: r.cost_usd for r in by_origin}
    elapsed = max((until - first).total_seconds() / 86400, 1 / 24)
    days = (following - first).days
    rows = []
    chosen = [("team", n, b, spent) for n, b in sorted(budgets.items())]
    chosen += [("account", n, b, spent_by_account) for n, b in sorted(by_account.items())]
    for scope, name, budget, spent_by in chosen:
        so_far = spent_by.get(name, 0.0)
        burn = so_far / elapsed
        rows.append(
            BudgetRow(
                team=name,
                budget_usd=budget,
                spent_usd=round(so_far, 2),
                days_elapsed=round(elapsed, 2),
                days_in_month=days,
                burn_per_day_usd=round(burn, 2),
                forecast_usd=round(burn * days, 2),
                scope=scope,
            )
        )
    return rows


def budget_alerts(rows: Iterable[BudgetRow], thresholds: Sequence[int]) -> list[tuple[BudgetRow, int]]:
    """The (team, threshold) pairs whose spend to date has reached the threshold; the caller sends each once."""
    return [(row, t) for row in rows for t in thresholds if row.spent_percent >= t]


# --- trends --------------------------------------------------------------------------------------------------------


def with_history(report: Report, history: Iterable[TrendPoint], periods: int = TREND_PERIODS) -> Report:
    """Attach the last ``periods`` earlier reports of the same kind (oldest first); duplicates keep the newest."""
    earlier = {(p.start, p.end): p for p in history if p.kind == report.kind and p.end <= report.start}
    report.trends = sorted(earlier.values(), key=lambda p: p.start)[-periods:]
    return report


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
    prices: costs.PriceBook | None = None,
) -> Report:
    """Assemble the report; an empty period gives a report that says so, never an error."""
    generated = now or dt.datetime.now(dt.UTC)
    security = security_section(audit, previous_audit, policy.reports.top_rows, descriptions, errors)
    hours_rows = audit.get("gpu_instance_hours", {}).get("rows", [])
    book = prices or costs.PriceBook(policy.lifecycle)
    cost = cost_section(ledger_items, policy, start, end, hours_rows, book)
    report = Report(
        kind=kind,
        start=start,
        end=end,
        generated_at=generated,
        security=security,
        cost=cost,
        findings=findings_section(ledger_items, policy, start, end),
        budgets=budget_section(ledger_items, policy, end, book),
        charts=fleet_charts(ledger_items, cost, start, end),
        utilisation=utilisation_series(ledger_items, start, end),
        notes=list(notes),
        dashboard_url=policy.notifications.dashboard_url,
        governor_tags=governor_tags_table(ledger_items, start, end),
    )
    if report.empty:
        report.notes.append("nothing happened in this period: no audit rows, no GPU usage, no utilisation samples")
    return report


def fleet_charts(
    items: Sequence[Mapping[str, Any]], cost: CostSection, start: dt.datetime, end: dt.datetime
) -> charting.FleetCharts:
    """The fleet views: stacked GPU-hours, idle dollars by team, and a heat map of the top idle offenders."""
    idle_by_team: dict[str, float] = defaultdict(float)
    for row in cost.offenders.rows:
        idle_by_team[str(row["team"])] += float(row["idle_usd"])
    top = [
        (str(r["instance_id"]), f"{r['instance_id']} ({r['owner']}, {r['instance_type']})")
        for r in cost.offenders.rows[: charting.HEATMAP_ROWS]
    ]
    starts, rows = charting.heatmap(items, start, end, top)
    return charting.FleetCharts(
        bucket_minutes=int(charting.bucket_size(start, end).total_seconds() // 60),
        usage=charting.fleet_usage(items, start, end),
        idle_cost_by_team=sorted(
            ((team, round(usd, 2)) for team, usd in idle_by_team.items() if usd > 0), key=lambda p: (-p[1], p[0])
        )[:12],
        heatmap=rows,
        heatmap_starts=starts,
    )


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


# --- formatting ----------------------------------------------------------------------------------------------------

HEADERS = {
    "team": "Team",
    "owner": "Owner",
    "account": "Account",
    "region": "Region",
    "scope": "Budget for",
    "name": "Name",
    "would_reclaim_gpu_hours": "Would reclaim GPU-hours",
    "reclaimed_gpu_hours": "Reclaimed GPU-hours",
    "would_save_usd": "Would save",
    "decisions_to_act": "Decisions to act",
    "instance_type": "Instance type",
    "instance_id": "Instance",
    "sessions": "Sessions",
    "instance_hours": "Instance-hours",
    "gpu_hours": "GPU-hours",
    "cost_usd": "Spend",
    "idle_usd": "Idle spend",
    "idle_gpu_hours": "Idle GPU-hours",
    "reclaimed_usd": "Reclaimed",
    "would_reclaim_usd": "Would reclaim",
    "max_gpu_utilization": "Peak GPU %",
    "samples": "Samples",
    "suggestion": "Suggestion",
    "week": "Week",
    "zone": "Zone",
    "interruptions": "Interruptions",
    "budget_usd": "Budget",
    "spent_usd": "Spent this month",
    "spent_percent": "Spent %",
    "burn_per_day_usd": "Burn per day",
    "forecast_usd": "Month-end forecast",
    "eventtime": "Time",
    "eventname": "Event",
    "eventid": "Event id",
    "eventsource": "Source",
    "useridentity_arn": "Who",
    "sourceipaddress": "Source IP",
    "awsregion": "Region",
    "errorcode": "Error",
}
ID_COLUMNS = frozenset({"instance_id", "resource", "eventid", "event_id", "useridentity_arn", "arn", "requestid"})
ID_CHARS = 22
TEXT_CHARS = 100


def human_header(column: str) -> str:
    """``gpu_hours`` -> ``GPU-hours``; unknown snake_case columns get spaces and a capital."""
    if column in HEADERS:
        return HEADERS[column]
    text = column.replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def money(value: float) -> str:
    """US dollars with thousands separators and cents: ``$1,002.50``."""
    return f"-${-value:,.2f}" if value < 0 else f"${value:,.2f}"


def _plural(count: int, word: str, plural: str | None = None) -> str:
    """``1 row``, ``2 rows``, ``1,204 interruptions``."""
    return f"{count:,} {word if count == 1 else (plural or word + 's')}"


def age_text(since: dt.datetime, now: dt.datetime) -> str:
    """A finding's age in the largest whole unit: ``40 min``, ``5 h``, ``3 days``."""
    minutes = max(int((now - since).total_seconds() // 60), 0)
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 48 * 60:
        return f"{minutes // 60} h"
    return _plural(minutes // (24 * 60), "day")


def numeric_column(column: str) -> bool:
    return column.endswith(("_usd", "_hours", "_percent", "_utilization")) or column in {
        "sessions",
        "samples",
        "interruptions",
        "count",
    }


def format_value(column: str, value: Any) -> str:
    """How a cell reads: money for ``*_usd``, one decimal for hours and percentages, separators for counts."""
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if column.endswith("_usd"):
            return money(float(value))
        if column.endswith(("_hours", "_percent", "_utilization")):
            return f"{float(value):,.1f}"
        if isinstance(value, int):
            return f"{value:,}"
        return f"{value:,.2f}"
    return str(_plain_value(value))


def _plain_value(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, list | dict):
        return json.dumps(value, default=str)
    return value


def _period_text(report: Report) -> str:
    span = report.end - report.start
    if span in (dt.timedelta(days=1), dt.timedelta(days=7)) and report.start.time() == dt.time(0):
        last = report.end - dt.timedelta(seconds=1)
        if span == dt.timedelta(days=1):
            return f"{report.start:%a %d %b %Y} (UTC)"
        return f"{report.start:%a %d %b} to {last:%a %d %b %Y} (UTC)"
    return f"{report.start:%d %b %Y %H:%M} to {report.end:%d %b %Y %H:%M} UTC"


def title(report: Report) -> str:
    label = {"daily": "daily", "weekly": "weekly", "custom": "fleet"}[report.kind]
    audience = f" for team {report.audience}" if report.audience else ""
    return f"GPU {label} report{audience}, {_period_text(report)}"


def team_view(report: Report, team: str) -> Report:
    """The report narrowed to one team, for its own digest: its open findings, its spend, idle and budget.

    Audit activity and the fleet trend stay in the fleet report (the security channel's); the money figures are the
    team's row of "spend by team" and its idle offenders, so a team sees exactly its share of the fleet report.
    """
    cost = report.cost
    row = next((r for r in cost.by_team.rows if str(r.get("team")) == team), None)
    offenders = [r for r in cost.offenders.rows if str(r.get("team")) == team]
    narrowed = cost.model_copy(
        update={
            "by_team": cost.by_team.model_copy(update={"rows": [row] if row else []}),
            "offenders": cost.offenders.model_copy(update={"rows": offenders}),
            "gpu_hours_total": float(row["gpu_hours"]) if row else 0.0,
            "cost_total_usd": float(row["cost_usd"]) if row else 0.0,
            "idle_cost_usd": round(sum(float(r.get("idle_usd") or 0.0) for r in offenders), 2),
            "savings_usd": round(sum(float(r.get("reclaimed_usd") or 0.0) for r in offenders), 2),
            "would_save_usd": round(sum(float(r.get("would_reclaim_usd") or 0.0) for r in offenders), 2),
            "would_reclaim_gpu_hours": cost.would_reclaim_gpu_hours_by_team.get(team, 0.0),
            "would_reclaim_gpu_hours_by_team": {},
            "by_account": None,  # a team digest shows its own spend, not the organisation's
            "idle_would_act": sum(1 for r in offenders if float(r.get("would_reclaim_usd") or 0.0) > 0),
        }
    )
    return report.model_copy(
        update={
            "audience": team,
            "cost": narrowed,
            "findings": [f for f in report.findings if f.team == team],
            "budgets": [b for b in report.budgets if b.scope == "team" and b.team == team],
            "security": [],
            "trends": [],
        }
    )


def _delta(now: float, before: float | None, money_unit: bool = True) -> str:
    if before is None:
        return ""
    change = now - before
    if abs(change) < 0.005:
        return "same as the period before"
    arrow = "▲" if change > 0 else "▼"
    shown = money(abs(change)) if money_unit else f"{abs(change):,.1f}"
    return f"{arrow} {shown} vs the period before"


# --- CSV -----------------------------------------------------------------------------------------------------------


def csv_files(report: Report, audit: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, str]:
    """Every table as CSV with a header row, even when empty: findings, budgets, cost tables, each audit query."""
    files: dict[str, str] = {"findings.csv": _csv(FINDING_COLUMNS, report.findings_table().rows)}
    if report.budgets:
        table = report.budgets_table()
        files["budgets.csv"] = _csv(table.columns, table.rows)
    for table in report.tables():
        files[f"{table.name}.csv"] = _csv(table.columns, table.rows)
    for summary in report.security:
        result = (audit or {}).get(summary.name, {})
        rows = list(result.get("rows", summary.top_rows))
        columns = list(result.get("columns") or []) or _columns(rows) or summary.columns or ["no_rows_in_period"]
        files[f"security_{summary.name}.csv"] = _csv(columns, rows)
    return files


def _csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_safe(_plain_value(v)) for k, v in row.items()})
    return buffer.getvalue()


#: The CSV sink's one escape (``governor.domain.escape.csv_cell``), under the name the report's writers use.
csv_safe = csv_cell


# --- HTML ----------------------------------------------------------------------------------------------------------

_CSS = """
*{box-sizing:border-box}
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;padding:20px;max-width:1200px;
color:#111827;background:#fff;font-size:14px;line-height:1.45;overflow-wrap:anywhere}
h1{font-size:21px;margin:0}h2{font-size:17px;margin:26px 0 8px;padding-bottom:3px;border-bottom:2px solid #e5e7eb}
h3{font-size:14px;margin:16px 0 6px}.muted{color:#6b7280}p{margin:6px 0}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:10px;margin:12px 0}
.tile{border:1px solid #e5e7eb;border-radius:8px;padding:8px 12px;background:#f9fafb}
.tile b{display:block;font-size:20px;font-variant-numeric:tabular-nums}.tile small{display:block;color:#6b7280}
.tile.bad{border-color:#fca5a5;background:#fef2f2}.tile.warn{border-color:#fcd34d;background:#fffbeb}
.todo{margin:8px 0;padding:10px 14px 10px 30px;border-left:4px solid #d55e00;background:#fff7ed;border-radius:4px}
.todo li{margin:3px 0}.ok{border-left-color:#059669;background:#ecfdf5}
.wide{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:4px 0 10px;font-size:13px;max-width:100%}
th,td{border-bottom:1px solid #e5e7eb;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6;font-weight:600;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.id{display:inline-block;max-width:14em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:bottom;
font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.sev{display:inline-block;white-space:nowrap;padding:0 6px;border-radius:9px;font-size:12px;font-weight:600;color:#fff}
.sev.critical{background:#dc2626}.sev.warning{background:#d97706}.st-resolved{color:#059669}.st-open{color:#b91c1c}
.note{background:#fef3c7;padding:6px 10px;border-radius:6px}
.legend span{display:inline-block;margin-right:14px;font-size:12px;white-space:nowrap}
.legend i{display:inline-block;width:11px;height:11px;margin-right:5px;border-radius:2px;vertical-align:middle}
.bars{width:100%}.bars td{border:0;padding:2px 6px}.bar-cell{width:60%}.bar{height:14px;border-radius:2px}
.bar-label{max-width:18em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.heatmap td.heat{width:14px;min-width:6px;height:16px;padding:0;border:1px solid #fff}
.heatmap .heat-tick{font-weight:400;font-size:11px;color:#6b7280;background:none;padding:0 2px}
.cols{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:20px}
@media (max-width:900px){.cols{grid-template-columns:minmax(0,1fr)}}
details{margin:6px 0}summary{cursor:pointer;color:#1d4ed8}svg.chart{display:block;max-width:100%;height:auto}
img{max-width:100%;border:1px solid #e5e7eb;border-radius:8px}
"""


def _cell_html(column: str, value: Any) -> str:
    """A table cell: numbers right-aligned; long ids shortened with the full value in a tooltip."""
    text = format_value(column, value)
    if numeric_column(column) and isinstance(value, int | float):
        return f"<td class='num'>{html.escape(text)}</td>"
    limit = ID_CHARS if column in ID_COLUMNS else TEXT_CHARS
    if column in ID_COLUMNS or len(text) > limit:
        shown = text if len(text) <= limit else text[: limit - 1] + "…"
        css = "id" if column in ID_COLUMNS else ""
        return f"<td><span class='{css}' title='{html.escape(text)}'>{html.escape(shown)}</span></td>"
    return f"<td>{html.escape(text)}</td>"


def _html_table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]], empty: str = "None.") -> str:
    if not rows:
        return f"<p class='muted'>{html.escape(empty)}</p>"
    head = "".join(
        f"<th class='{'num' if numeric_column(c) else ''}'>{html.escape(human_header(c))}</th>" for c in columns
    )
    body = "".join("<tr>" + "".join(_cell_html(c, row.get(c)) for c in columns) + "</tr>" for row in rows)
    return f"<div class='wide'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def would_reclaim_text(cost: CostSection) -> str:
    """The report-only idle policy's value in one phrase, the same words in HTML, Slack, email and the demo summary."""
    return (
        f"would stop {cost.idle_would_act} instance(s), would reclaim {cost.would_reclaim_gpu_hours:,.1f} "
        f"GPU-hours, ${cost.would_save_usd:,.2f}"
    )


def _tile(value: str, label: str, sub: str = "", css: str = "") -> str:
    small = f"<small>{html.escape(sub)}</small>" if sub else ""
    return f"<div class='tile {css}'><b>{html.escape(value)}</b>{html.escape(label)}{small}</div>"


def todo_items(report: Report, limit: int = 5) -> list[str]:
    """What a reader should do today, in plain sentences, most urgent first (also used by Slack and email)."""
    todo: list[str] = []
    for finding in report.open_findings[:limit]:
        who = f" ({finding.owner}, {finding.team})" if finding.owner != "unknown" or finding.team != "unknown" else ""
        todo.append(
            f"{finding.severity.capitalize()}: {finding.summary.rstrip('.')} on {finding.resource}{who}, "
            f"open {age_text(finding.first_seen, report.end)}. {finding.remediation}"
        )
    hidden = len(report.open_findings) - limit
    if hidden > 0:
        todo.append(f"…and {_plural(hidden, 'more open finding')} in findings.csv.")
    for budget in report.budgets:
        if budget.forecast_percent >= 100:
            todo.append(
                f"Budget: {budget.label} is on course for {money(budget.forecast_usd)} this month, "
                f"{budget.forecast_percent:.0f}% of its {money(budget.budget_usd)} budget."
            )
    cost = report.cost
    if not cost.idle_enforced and cost.would_save_usd > 0:
        todo.append(
            f"Idle enforcement is off (report-only): switching idle.enforce on would have reclaimed "
            f"{cost.would_reclaim_gpu_hours:,.1f} GPU-hours, {money(cost.would_save_usd)}, in this period."
        )
    return todo


def _tiles(report: Report) -> str:
    cost = report.cost
    before = report.previous
    critical = sum(1 for f in report.open_findings if f.severity == "critical")
    warning = sum(1 for f in report.open_findings if f.severity == "warning")
    share = f"{100 * cost.idle_cost_usd / cost.cost_total_usd:.0f}% of spend" if cost.cost_total_usd else ""
    tiles = [
        _tile(
            f"{critical + warning:,} open",
            "findings",
            f"{critical:,} critical · {warning:,} warning · "
            f"{len(report.findings) - len(report.open_findings):,} resolved",
            "bad" if critical else ("warn" if warning else ""),
        ),
        _tile(
            money(cost.cost_total_usd), "GPU spend", _delta(cost.cost_total_usd, before.spend_usd if before else None)
        ),
        _tile(money(cost.idle_cost_usd), "idle spend", share, "warn" if cost.idle_cost_usd else ""),
    ]
    if cost.idle_enforced or cost.savings_usd:
        tiles.append(
            _tile(money(cost.savings_usd), "reclaimed", f"{cost.idle_gpu_hours_reclaimed:,.1f} GPU-hours given back")
        )
    if not cost.idle_enforced:
        tiles.append(
            _tile(
                money(cost.would_save_usd),
                "would reclaim",
                f"{cost.would_reclaim_gpu_hours:,.1f} GPU-hours if idle.enforce were on",
            )
        )
    tiles.append(
        _tile(
            f"{cost.gpu_hours_total:,.1f}",
            "GPU-hours",
            _delta(cost.gpu_hours_total, before.gpu_hours if before else None, False),
        )
    )
    if report.budgets:
        worst = max(report.budgets, key=lambda b: b.forecast_percent)
        tiles.append(
            _tile(
                f"{worst.forecast_percent:.0f}%",
                f"forecast of budget ({worst.team})",
                f"{money(worst.spent_usd)} of {money(worst.budget_usd)} spent",
                "bad" if worst.forecast_percent >= 100 else ("warn" if worst.forecast_percent >= 80 else ""),
            )
        )
    return "<div class='tiles'>" + "".join(tiles) + "</div>"


def _findings_html(report: Report) -> str:
    def rows(findings: Sequence[FindingRow]) -> str:
        out = []
        for f in findings:
            resolution = f" <span class='muted'>({html.escape(f.resolution)})</span>" if f.resolution else ""
            out.append(
                "<tr>"
                f"<td><span class='sev {f.severity}'>{f.severity}</span></td>"
                f"<td>{html.escape(f.summary)}<br><span class='muted'>{html.escape(f.remediation)}</span></td>"
                f"<td><span class='id' title='{html.escape(f.resource)}'>{html.escape(f.resource)}</span></td>"
                f"<td>{html.escape(f.owner)}<br><span class='muted'>{html.escape(f.team)}</span></td>"
                f"<td class='num' title='first seen {f.first_seen:%Y-%m-%d %H:%M} UTC'>"
                f"{html.escape(age_text(f.first_seen, report.end))}</td>"
                f"<td class='st-{f.status}'>{f.status}{resolution}</td>"
                "</tr>"
            )
        head = (
            "<tr><th>Severity</th><th>Finding and what to do</th><th>Resource</th><th>Owner</th>"
            "<th class='num'>Age</th><th>Status</th></tr>"
        )
        return f"<div class='wide'><table><thead>{head}</thead><tbody>{''.join(out)}</tbody></table></div>"

    def more(shown: int, total: int) -> str:
        return f"<p class='muted'>…and {total - shown:,} more in findings.csv.</p>" if total > shown else ""

    open_ = report.open_findings
    resolved = [f for f in report.findings if f.status == "resolved"]
    parts = [rows(open_[:FINDING_ROWS]) if open_ else "<p>No open warning or critical findings.</p>"]
    parts.append(more(min(len(open_), FINDING_ROWS), len(open_)))
    if resolved:
        parts.append(
            f"<details><summary>{_plural(len(resolved), 'finding')} resolved in the period</summary>"
            f"{rows(resolved[:FINDING_ROWS])}{more(min(len(resolved), FINDING_ROWS), len(resolved))}</details>"
        )
    return "".join(parts)


def _trends_html(report: Report) -> str:
    points = [*report.trends, report.trend_point()]
    labels = [f"{p.start:%d %b %H:%M}" if p.kind == "custom" else f"{p.start:%a %d %b}" for p in points]
    rows: list[dict[str, Any]] = [
        {
            "period": label,
            "spend_usd": p.spend_usd,
            "idle_usd": p.idle_usd,
            "gpu_hours": p.gpu_hours,
            "open_critical": p.open_critical,
            "open_warning": p.open_warning,
            "audit_events": p.audit_events,
        }
        for label, p in zip(labels, points, strict=True)
    ]
    columns = ["period", "spend_usd", "idle_usd", "gpu_hours", "open_critical", "open_warning", "audit_events"]
    top = max((p.spend_usd for p in points), default=0) or 1.0
    spark = "".join(
        f"<span title='{html.escape(label)}: {money(p.spend_usd)}' style='display:inline-block;width:14px;"
        f"margin-right:3px;vertical-align:bottom;background:{charting.PALETTE['busy']};"
        f"height:{max(2, round(40 * p.spend_usd / top))}px'></span>"
        for label, p in zip(labels, points, strict=True)
    )
    return f"<p aria-label='spend per period'>{spark}</p>" + _html_table(columns, rows)


def _audit_html(report: Report) -> str:
    compare = any(q.previous_count is not None for q in report.security)
    overview = []
    for q in report.security:
        row: dict[str, Any] = {"query": q.name.replace("_", " "), "count": q.count}
        if compare:
            row["change"] = q.change_text() if q.change is not None else ""
        row["watches"] = q.error or q.description
        overview.append(row)
    columns = ["query", "count", *(["change"] if compare else []), "watches"]
    parts = [
        "<p class='muted'>API calls the CIS monitoring queries match in CloudTrail. These are activity worth a look, "
        "not findings: most are routine.</p>",
        _html_table(columns, overview, "No audit queries ran."),
    ]
    for query in report.security:
        if not query.count:
            continue
        shown = len(query.top_rows)
        parts.append(
            f"<details><summary>{html.escape(query.name.replace('_', ' '))}: "
            f"{_plural(query.count, 'event')}"
            + (f", first {shown} shown" if shown < query.count else "")
            + f" (all in security_{html.escape(query.name)}.csv)</summary>"
            + _html_table(query.columns, query.top_rows)
            + "</details>"
        )
    return "".join(parts)


def render_html(report: Report, chart_src: str | None = None, *, inline_svg: bool = True) -> str:
    """A self-contained page (inline CSS), ordered as a reader acts: today's to-do, money, trends, audit activity.

    The fleet chart is inline SVG for browsers; ``chart_src`` (a file name, ``cid:...`` or a data URI) adds the same
    chart as a PNG, which is what email clients that drop SVG show (``inline_svg=False`` for email).
    """
    cost = report.cost
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        f"<title>{html.escape(title(report))}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title(report))}</h1>",
        f"<p class='muted'>Generated {report.generated_at:%d %b %Y %H:%M} UTC"
        + (
            f" · <a href='{html.escape(report.report_url)}'>full report</a>"
            + (f" (link expires {report.report_url_expires:%d %b %H:%M} UTC)" if report.report_url_expires else "")
            if report.report_url
            else ""
        )
        + "</p>",
    ]
    todo = todo_items(report)
    if todo:
        parts.append("<ol class='todo'>" + "".join(f"<li>{html.escape(t)}</li>" for t in todo) + "</ol>")
    else:
        parts.append("<p class='todo ok'>Nothing needs doing today: no open warning or critical findings.</p>")
    parts.append(_tiles(report))
    team_rows = cost.by_team.rows[:8]
    parts.append("<div class='cols'><div>")
    parts.append("<h3>Spend by team</h3>")
    parts.append(_html_table(cost.by_team.columns, team_rows, "No GPU usage recorded in this period."))
    if len(cost.by_team.rows) > len(team_rows):
        parts.append(f"<p class='muted'>All {len(cost.by_team.rows):,} teams in gpu_hours_by_team.csv.</p>")
    parts.append("</div><div><h3>Idle spend by team</h3>")
    parts.append(charting.bars_html(report.charts.idle_cost_by_team))
    parts.append("</div></div>")
    if cost.by_account is not None:
        parts.append(f"<h3>{html.escape(cost.by_account.title)}</h3>")
        parts.append(_html_table(cost.by_account.columns, cost.by_account.rows[:20]))
        if len(cost.by_account.rows) > 20:
            parts.append(f"<p class='muted'>All {len(cost.by_account.rows):,} in {cost.by_account.name}.csv.</p>")
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in report.notes]

    parts.append(
        f"<h2>Needs attention <span class='muted'>({_plural(len(report.open_findings), 'open finding')})</span></h2>"
    )
    parts.append(_findings_html(report))

    parts.append("<h2>Money</h2>")
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in cost.notes]
    step = (
        _plural(report.charts.bucket_minutes, "minute")
        if report.charts.bucket_minutes < 120
        else (_plural(report.charts.bucket_minutes // 60, "hour"))
    )
    parts.append(
        f"<h3>Fleet GPU-hours: busy, idle and unmonitored <span class='muted'>(GPU-hours per {step})</span></h3>"
    )
    if not report.charts.empty:
        if inline_svg:
            parts.append(charting.usage_svg(report.charts, report.end))
        if chart_src and not inline_svg:
            parts.append(f"<img src='{html.escape(chart_src)}' alt='Fleet GPU-hours: busy, idle and unmonitored'>")
        parts.append(charting.legend_html())
    else:
        parts.append("<p class='muted'>No GPU usage sessions in this period.</p>")
    if report.budgets:
        parts.append("<h3>Monthly budgets</h3>")
        table = report.budgets_table()
        parts.append(_html_table(table.columns, table.rows))
    idle_word = "reclaimed" if cost.idle_enforced else "would reclaim"
    parts.append(
        f"<p>Idle: {cost.idle_gpu_hours_detected:,.1f} GPU-hours on "
        f"{_plural(cost.idle_instances_detected, 'instance')} ({money(cost.idle_cost_usd)}); "
        + (
            f"{_plural(cost.idle_actions, 'instance')} stopped or terminated, "
            f"{cost.idle_gpu_hours_reclaimed:,.1f} GPU-hours reclaimed, {money(cost.savings_usd)} saved"
            if cost.idle_enforced or cost.savings_usd
            else f"report-only: enforcement {idle_word} {cost.would_reclaim_gpu_hours:,.1f} GPU-hours, "
            f"{money(cost.would_save_usd)}"
        )
        + f" (prices as of {html.escape(cost.prices_as_of)}).</p>"
    )
    offenders = cost.offenders
    parts.append("<h3>Top idle offenders</h3>")
    parts.append(_html_table(offenders.columns, offenders.rows[:10], "No idle GPU instances in this period."))
    if len(offenders.rows) > 10:
        parts.append(f"<p class='muted'>All {len(offenders.rows):,} in idle_offenders.csv.</p>")
    if report.charts.heatmap:
        parts.append("<h3>Busiest GPU's utilisation, top idle offenders</h3>")
        parts.append(charting.heatmap_html(report.charts))
    for table in (cost.by_owner, cost.by_type):
        parts.append(f"<h3>{html.escape(table.title)}</h3>")
        parts.append(_html_table(table.columns, table.rows[:10]))
        if len(table.rows) > 10:
            parts.append(f"<p class='muted'>All {len(table.rows):,} rows in {table.name}.csv.</p>")
    stats = cost.spot
    parts.append("<h3>Spot</h3>")
    parts.append(
        f"<p>{_plural(stats.interruptions, 'interruption')}, "
        f"{_plural(stats.rebalance_recommendations, 'rebalance recommendation')}; checkpoints "
        f"{stats.checkpoints_delivered:,} delivered of {stats.checkpoints_requested:,} sent, "
        f"{stats.checkpoints_succeeded:,} finished successfully.</p>"
    )
    if stats.by_pool.rows:
        parts.append(_html_table(stats.by_pool.columns, stats.by_pool.rows))
    parts.append(f"<h3>{html.escape(cost.rightsizing.title)}</h3>")
    parts.append(_html_table(cost.rightsizing.columns, cost.rightsizing.rows[:10], "No candidates."))
    tags = report.governor_tags
    if tags.rows:
        parts.append(f"<h3>{html.escape(tags.title)}</h3>")
        parts.append(_html_table(tags.columns, tags.rows[:20]))
        if len(tags.rows) > 20:
            parts.append(f"<p class='muted'>All {len(tags.rows):,} in {tags.name}.csv.</p>")

    if report.trends:
        parts.append(f"<h2>Trend over the last {_plural(len(report.trends) + 1, report.kind + ' report')}</h2>")
        parts.append(_trends_html(report))

    parts.append("<h2>Audit activity (CIS monitoring queries)</h2>")
    parts.append(_audit_html(report))
    if report.dashboard_url:
        url = html.escape(report.dashboard_url)
        parts.append(f"<p><a href='{url}'>CloudWatch dashboard</a></p>")
    parts.append("<p class='muted'>Every table is attached in full as CSV.</p></body></html>")
    return "\n".join(parts)


# --- Slack and text ------------------------------------------------------------------------------------------------


def _link_line(report: Report) -> str:
    if not report.report_url:
        return "The full report (HTML and every table as CSV) is in the reports bucket."
    expiry = f" The link expires {report.report_url_expires:%d %b %Y %H:%M} UTC." if report.report_url_expires else ""
    return f"<{report.report_url}|Open the full report> (charts, every finding, every table).{expiry}"


def slack_messages(report: Report, teams: int = 5) -> list[Message]:
    """The report as one short Block Kit digest: today's to-do, money by team, budgets, and a link to the full report.

    Built with ``slack_sdk``'s Block Kit models, so a block Slack would reject fails here, not in the channel.
    """
    from slack_sdk.models.blocks import ContextBlock, DividerBlock, HeaderBlock, MarkdownTextObject, SectionBlock

    cost = report.cost
    blocks: list[Any] = [HeaderBlock(text=title(report)[:MAX_HEADER_CHARS])]
    todo = todo_items(report)
    if todo:
        lines = "\n".join(f"{i}. {escape_mrkdwn(t)}" for i, t in enumerate(todo, start=1))
        text = f"*What to do today*\n{lines}"
    else:
        text = "*Nothing needs doing today:* no open warning or critical findings."
    blocks += [SectionBlock(text=MarkdownTextObject(text=chunk)) for chunk in split_text(text) if chunk]
    reclaim = (
        f"{money(cost.savings_usd)} reclaimed"
        if cost.idle_enforced or cost.savings_usd
        else f"report-only: {would_reclaim_text(cost)} with idle.enforce on"
    )
    money_lines = [
        f"*Money* {money(cost.cost_total_usd)} on {cost.gpu_hours_total:,.1f} GPU-hours; "
        f"{money(cost.idle_cost_usd)} of it idle; {reclaim}."
    ]
    previous = report.previous
    if previous is not None:
        money_lines.append(f"Spend {_delta(cost.cost_total_usd, previous.spend_usd)}.")
    for row in cost.by_team.rows[:teams]:
        idle = f" (idle {money(float(row.get('idle_usd', 0.0)))})" if row.get("idle_usd") else ""
        money_lines.append(
            f"• {escape_mrkdwn(str(row['team']))}: {money(float(row['cost_usd']))}, "
            f"{float(row['gpu_hours']):,.1f} GPU-hours{idle}"
        )
    if len(cost.by_team.rows) > teams:
        money_lines.append(f"…and {_plural(len(cost.by_team.rows) - teams, 'more team')} in the full report.")
    if cost.by_account is not None:
        for row in cost.by_account.rows[:teams]:
            money_lines.append(
                f"• account {escape_mrkdwn(str(row['account']))} {escape_mrkdwn(str(row['region']))}: "
                f"{money(float(row['cost_usd']))}, {float(row['gpu_hours']):,.1f} GPU-hours"
            )
        if len(cost.by_account.rows) > teams:
            more = len(cost.by_account.rows) - teams
            money_lines.append(f"…and {_plural(more, 'more account and region', 'more accounts and regions')}.")
    for budget in report.budgets:
        money_lines.append(
            f"• budget {escape_mrkdwn(budget.label)}: {money(budget.spent_usd)} of {money(budget.budget_usd)} "
            f"({budget.spent_percent:.0f}%), forecast {money(budget.forecast_usd)} by month end"
        )
    blocks.append(DividerBlock())
    blocks += [
        SectionBlock(text=MarkdownTextObject(text=chunk)) for chunk in split_text("\n".join(money_lines)) if chunk
    ]
    audit_total = sum(q.count for q in report.security)
    busiest = [q for q in report.security if q.count][:3]
    if audit_total:
        named = ", ".join(f"{q.name.replace('_', ' ')} {q.count:,}" for q in busiest)
        blocks.append(
            ContextBlock(
                elements=[
                    MarkdownTextObject(
                        text=escape_mrkdwn(
                            f"Audit activity (not findings): {_plural(audit_total, 'matching API call')}; {named}."
                        )
                    )
                ]
            )
        )
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_link_line(report))]))
    fallback = f"{title(report)}: {_plural(len(report.open_findings), 'open finding')}, {money(cost.cost_total_usd)}"
    return [{"text": fallback[:MAX_FALLBACK_CHARS], "blocks": [block.to_dict() for block in blocks[:MAX_BLOCKS]]}]


def render_text(report: Report) -> str:
    """The plain-text alternative of the email (and the command's summary), in the HTML's order."""
    cost = report.cost
    lines = [title(report), ""]
    todo = todo_items(report)
    lines += (
        ["What to do today:"] + [f"  {i}. {t}" for i, t in enumerate(todo, start=1)]
        if todo
        else ["Nothing needs doing today: no open warning or critical findings."]
    )
    lines += ["", *report.notes] if report.notes else []
    lines += [
        "",
        "Money",
        f"  GPU spend {money(cost.cost_total_usd)} on {cost.gpu_hours_total:,.1f} GPU-hours",
        f"  idle {money(cost.idle_cost_usd)} ({cost.idle_gpu_hours_detected:,.1f} GPU-hours); "
        + (
            f"reclaimed {cost.idle_gpu_hours_reclaimed:,.1f} GPU-hours, {money(cost.savings_usd)}"
            if cost.idle_enforced or cost.savings_usd
            else f"would reclaim {cost.would_reclaim_gpu_hours:,.1f} GPU-hours, {money(cost.would_save_usd)}"
        ),
    ]
    for row in cost.by_team.rows[:10]:
        lines.append(f"  {row['team']}: {money(float(row['cost_usd']))}, {float(row['gpu_hours']):,.1f} GPU-hours")
    for row in (cost.by_account.rows if cost.by_account is not None else [])[:20]:
        lines.append(
            f"  account {row['account']} {row['region']}: {money(float(row['cost_usd']))}, "
            f"{float(row['gpu_hours']):,.1f} GPU-hours"
        )
    for budget in report.budgets:
        lines.append(
            f"  budget {budget.label}: {money(budget.spent_usd)} of {money(budget.budget_usd)}, "
            f"forecast {money(budget.forecast_usd)}"
        )
    lines += [
        f"  Spot: {_plural(cost.spot.interruptions, 'interruption')}, checkpoints delivered "
        f"{cost.spot.checkpoints_delivered}/{cost.spot.checkpoints_requested}",
        f"  rightsizing: {_plural(len(cost.rightsizing.rows), 'candidate')}",
        "",
        "Audit activity (CIS monitoring queries; not findings)",
    ]
    for query in report.security:
        if query.count or query.error:
            change = f" ({query.change_text()})" if query.change is not None else ""
            lines.append(f"  {query.name}: {_plural(query.count, 'event')}{change}")
    lines += ["", "Every table is attached as CSV."]
    if report.report_url:
        lines.append(f"Full report: {report.report_url}")
    return "\n".join(lines) + "\n"
