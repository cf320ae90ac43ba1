"""Assembly: the report from its sections, its trend history, and one team's digest of it.

Inputs are plain data so the same code serves the Lambda (Athena results, DynamoDB ledger) and ``governor report``
(DuckDB results, an exported ledger file): audit results ``{query: {"count", "rows"}}`` for this period and the
previous one, and ledger items (decisions and keyed items) as dictionaries.

The order is the one a reader acts in: what needs attention now (the governor's open findings), then money (spend,
idle spend, reclaimed or would-reclaim, budgets, by team), then trends, then the audit activity (CIS monitoring
queries), which counts API calls worth a look and is kept apart from findings.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from governor.domain import costs, facts
from governor.policy import Policy
from governor.report import charts as charting
from governor.report.model import CostSection, Report, ReportKind, Table, TrendPoint
from governor.report.sections.budgets import budget_section
from governor.report.sections.cost import cost_section, utilisation_series
from governor.report.sections.findings import findings_section
from governor.report.sections.governor_cost import governor_cost
from governor.report.sections.security import governor_tags_table, security_section

TREND_PERIODS = 8


def with_history(report: Report, history: Iterable[TrendPoint], periods: int = TREND_PERIODS) -> Report:
    """Attach the last ``periods`` earlier reports of the same kind (oldest first); duplicates keep the newest."""
    earlier = {(p.start, p.end): p for p in history if p.kind == report.kind and p.end <= report.start}
    report.trends = sorted(earlier.values(), key=lambda p: p.start)[-periods:]
    return report


def price_book(
    policy: Policy,
    region: str | None,
    ce: Any = None,
    until: dt.datetime | None = None,
    queries: Any = None,
) -> costs.PriceBook:
    """The report's prices in order of truth: each instance's own rate from the CUR 2.0 table in Athena (``cur``,
    run through ``queries``, the audit workgroup's runner), else Cost Explorer's amortised cost by type (``cur`` and
    ``cost_explorer``), else the price recorded with each usage session, else the policy's table; each figure's
    source is named in the report."""
    pricing = policy.pricing
    effective: Any = None
    if pricing.effective_rates in ("cost_explorer", "cur"):
        from governor.adapters.cost_explorer import CostExplorerRates

        effective = CostExplorerRates(pricing.effective_rate_days, ce, now=until)
    if pricing.effective_rates == "cur" and pricing.cur is not None:
        from governor.adapters.cur import CurRates

        effective = CurRates(
            queries,
            pricing.cur.database,
            pricing.cur.table,
            partition=pricing.cur.billing_period_partition,
            families=policy.fleet.gpu_families,
            days=pricing.effective_rate_days,
            now=until,
            fallback=effective,
        )
    return costs.PriceBook(pricing, region=region, effective=effective)


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
    book = prices or costs.PriceBook(policy.pricing)
    cost = cost_section(ledger_items, policy, start, end, hours_rows, book)
    priced = governor_cost(ledger_items, policy, start, end)
    if priced is not None:
        cost.governor_cost_usd, cost.governor_cost_basis = priced
    records = facts.ledger_facts(ledger_items, book, end)  # each resource's record, decided once for the run
    report = Report(
        kind=kind,
        start=start,
        end=end,
        generated_at=generated,
        security=security,
        cost=cost,
        findings=findings_section(ledger_items, policy, start, end, book, records),
        budgets=budget_section(ledger_items, policy, end, book),
        charts=fleet_charts(ledger_items, cost, start, end),
        utilisation=utilisation_series(ledger_items, start, end),
        notes=list(notes),
        dashboard_url=policy.notifications.dashboard_url,
        governor_tags=governor_tags_table(ledger_items, start, end),
        resources=Table(
            name="resources",
            title="Resources",
            columns=list(facts.RESOURCE_COLUMNS),
            rows=[record.row() for record in records.values()],
        ),
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


def team_view(report: Report, team: str) -> Report:
    """The report narrowed to one team, for its own digest: its open findings, its spend, idle and budget.

    Audit activity and the fleet trend stay in the fleet report (the security channel's); the money figures are the
    team's row of "spend by team" and its idle offenders, so a team sees exactly its share of the fleet report.
    """
    narrowed = _team_cost(report.cost, team)
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


def _team_cost(cost: CostSection, team: str) -> CostSection:
    """The cost section of one team: its row of "spend by team", its idle offenders and what they add up to."""
    row = next((r for r in cost.by_team.rows if str(r.get("team")) == team), None)
    offenders = [r for r in cost.offenders.rows if str(r.get("team")) == team]
    return cost.model_copy(
        update={
            "by_team": cost.by_team.model_copy(update={"rows": [row] if row else []}),
            "offenders": cost.offenders.model_copy(update={"rows": offenders}),
            "gpu_hours_total": float(row["gpu_hours"]) if row else 0.0,
            "cost_total_usd": float(row["cost_usd"]) if row else 0.0,
            "idle_cost_usd": _total(offenders, "idle_usd"),
            "savings_usd": _total(offenders, "reclaimed_usd"),
            "would_save_usd": _total(offenders, "would_reclaim_usd"),
            "would_reclaim_gpu_hours": cost.would_reclaim_gpu_hours_by_team.get(team, 0.0),
            "would_reclaim_gpu_hours_by_team": {},
            "by_account": None,  # a team digest shows its own spend, not the organisation's
            "governor_cost_usd": None,  # what the governor cost is the fleet's, not one team's
            "coverage_source": None,  # commitments cover the account's fleet, not one team's share of it
            "idle_would_act": sum(1 for r in offenders if float(r.get("would_reclaim_usd") or 0.0) > 0),
            **_team_energy(cost, {str(r.get("instance_id")) for r in offenders}),
        }
    )


def _team_energy(cost: CostSection, instances: set[str]) -> dict[str, Any]:
    """The team's share of the idle GPU energy: its own instances' kWh and CO2e."""
    own = {i: v for i, v in cost.idle_energy_by_instance.items() if i in instances}
    hours = {i: h for i, h in cost.idle_energy_hours_by_instance.items() if i in instances}
    left = {i: m for i, m in cost.idle_energy_left_out_by_instance.items() if i in instances}
    return {
        "idle_energy_kwh": round(sum(kwh for kwh, _ in own.values()), 2),
        "idle_co2e_kg": round(sum(kg for _, kg in own.values()), 2),
        "idle_energy_by_instance": own,
        "idle_energy_gpu_hours": round(sum(hours.values()), 2),
        "idle_energy_hours_by_instance": hours,
        "idle_energy_left_out_by_instance": left,
        "idle_energy_left_out": {m: cost.idle_energy_left_out.get(m, "") for m in left.values()},
        "idle_energy_unknown_gpu_hours": round(sum(hours.get(i, 0.0) for i in left), 2),
        "energy": cost.energy.model_copy(update={"rows": []}),
    }


def _total(rows: Iterable[Mapping[str, Any]], column: str) -> float:
    return round(sum(float(r.get(column) or 0.0) for r in rows), 2)
