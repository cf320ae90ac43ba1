"""The report's data model: what one report says, built by ``sections`` and ``build``, drawn by ``render``.

Plain pydantic models, JSON-able (archived as report.json and summary.json), with the table views every rendering
shares (``Report.tables``, ``findings_table``, ``budgets_table``) and nothing that computes or formats.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field

from governor.domain.facts import RESOURCE_COLUMNS
from governor.domain.model import Model
from governor.report import charts as charting

ReportKind = Literal["daily", "weekly", "custom"]
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
ENERGY_TITLE = "Energy of idle GPU time, by GPU model"
ENERGY_COLUMNS = ("gpu_model", "idle_gpu_hours", "idle_watts", "busy_watts", "idle_kwh", "draw_source")
FINDING_COLUMNS = (
    "severity",
    "status",
    "usd_per_day",
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
    "problem",
)


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
    #: What is wrong, as the capability names it (``tcp 22 from 0.0.0.0/0``, ``idle``, ``unmonitored``): one row per
    #: policy, resource and problem.
    problem: str = ""
    #: What the problem's instance costs a day while it stays open (its hourly price x 24); None when the problem
    #: spends no money or the instance is unpriced.
    usd_per_day: float | None = None


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
    idle_energy_kwh: float = 0.0
    idle_co2e_kg: float = 0.0


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


PAID_UNUSED_COLUMNS = (
    "instance_id",
    "instance_type",
    "purchase",
    "reservation_id",
    "ends_at",
    "idle_gpu_hours",
    "idle_usd",
    "usd_per_day",
    "owner",
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
    #: The energy of idle GPU time (docs/reports.md, "GPU energy"): kWh, kg CO2e, idle GPU-hours of models with no
    #: known draw (not counted), and the per-model table with each draw's source.
    idle_energy_kwh: float = 0.0
    idle_co2e_kg: float = 0.0
    idle_energy_unknown_gpu_hours: float = 0.0
    idle_energy_by_instance: dict[str, tuple[float, float]] = Field(default_factory=dict)
    #: Every idle GPU-hour, counted or not, the models left out with why, and per instance (a team's share): the
    #: tile states the share covered. ``energy_basis`` names the PUE and grid factors with their sources.
    idle_energy_gpu_hours: float = 0.0
    idle_energy_left_out: dict[str, str] = Field(default_factory=dict)
    idle_energy_hours_by_instance: dict[str, float] = Field(default_factory=dict)
    idle_energy_left_out_by_instance: dict[str, str] = Field(default_factory=dict)
    energy_basis: str = ""
    energy: Table = Field(
        default_factory=lambda: Table(name="idle_energy", title=ENERGY_TITLE, columns=list(ENERGY_COLUMNS))
    )
    #: Idle hours of capacity paid for whatever happens (Capacity Blocks, capacity reservations): never a saving.
    #: Per instance type, where the rate behind its savings figures came from (effective rate, session, list, table).
    price_sources: dict[str, str] = Field(default_factory=dict)
    #: The GPU fleet's Savings Plans coverage (% of spend) and RI coverage (% of running hours), from Cost Explorer
    #: when ``pricing.effective_rates`` is cost_explorer; None otherwise.
    savings_plans_coverage_pct: float | None = None
    reserved_coverage_pct: float | None = None
    #: The window and source of the coverage figures ("Cost Explorer, 2026-11-01 to 2026-12-01"); None without them.
    coverage_source: str | None = None
    paid_unused_gpu_hours: float = 0.0
    paid_unused_usd: float = 0.0
    paid_unused: Table = Field(
        default_factory=lambda: Table(
            name="paid_unused", title="Paid for, unused: idle reserved capacity", columns=list(PAID_UNUSED_COLUMNS)
        )
    )
    #: EKS GPU-hours and idle GPU-hours by cluster and namespace (DCGM pod labels); None without such records.
    by_namespace: Table | None = None
    #: What the governor itself cost in the period (``governor.footprint``, as ``governor cost`` prices it) and what
    #: that covers; None when no sweep was recorded (or in a team's digest: it is the fleet's).
    governor_cost_usd: float | None = None
    governor_cost_basis: str = ""


GOVERNOR_TAGS_TITLE = "Exemptions, snoozes, ownership tags and checkpoint names, by who set them"
GOVERNOR_TAGS_COLUMNS = ("who", "resource_kind", "resource_id", "key", "value", "source", "at", "honoured")


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
    #: Every resource's record for this run (``governor.domain.facts``): its owner and how that is known, team,
    #: purchase model, one price with its basis, $/day, the action path that would run, metric source and status.
    #: The findings name owners from it; ``resources.csv`` (``governor report``) is this table.
    resources: Table = Field(
        default_factory=lambda: Table(name="resources", title="Resources", columns=list(RESOURCE_COLUMNS))
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
            *([cost.by_namespace] if cost.by_namespace is not None else []),
            cost.by_owner,
            cost.by_type,
            cost.offenders,
            *([cost.paid_unused] if cost.paid_unused.rows else []),
            cost.spot.by_pool,
            cost.rightsizing,
            cost.energy,
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
            idle_energy_kwh=self.cost.idle_energy_kwh,
            idle_co2e_kg=self.cost.idle_co2e_kg,
        )


def columns_of(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every column the rows hold, in the order they first appear."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return list(columns)
