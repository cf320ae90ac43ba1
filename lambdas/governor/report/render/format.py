"""How the report reads in every rendering: headers, money, ages, cells, the title, deltas and today's to-do."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from governor.domain.facts import per_day_text
from governor.report.model import CostSection, FindingRow, Report
from governor.report.words import plural

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
    "gpu_model": "GPU model",
    "idle_watts": "Idle draw (W)",
    "busy_watts": "Busy draw (W)",
    "idle_kwh": "Idle kWh",
    "draw_source": "Idle draw from",
    "reclaimed_usd_total": "Reclaimed",
    "usd_per_day": "At stake",
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


def age_text(since: dt.datetime, now: dt.datetime) -> str:
    """A finding's age in the largest whole unit: ``40 min``, ``5 h``, ``3 days``."""
    minutes = max(int((now - since).total_seconds() // 60), 0)
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 48 * 60:
        return f"{minutes // 60} h"
    return plural(minutes // (24 * 60), "day")


def numeric_column(column: str) -> bool:
    return column.endswith(("_usd", "_hours", "_percent", "_utilization", "_watts", "_kwh", "_per_day")) or column in {
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
        if column.endswith("usd_per_day"):
            return per_day_text(float(value))  # money at stake: one unit and one format on every surface
        if column.endswith(("_hours", "_percent", "_utilization", "_watts", "_kwh")):
            return f"{float(value):,.1f}"
        if isinstance(value, int):
            return f"{value:,}"
        return f"{value:,.2f}"
    return str(plain_value(value))


def plain_value(value: Any) -> Any:
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


def delta(now: float, before: float | None, money_unit: bool = True) -> str:
    """``▲ $151.00 vs the period before``; empty without an earlier period."""
    if before is None:
        return ""
    change = now - before
    if abs(change) < 0.005:
        return "same as the period before"
    arrow = "▲" if change > 0 else "▼"
    shown = money(abs(change)) if money_unit else f"{abs(change):,.1f}"
    return f"{arrow} {shown} vs the period before"


def would_reclaim_text(cost: CostSection) -> str:
    """The report-only idle policy's value in one phrase, the same words in HTML, Slack, email and the demo summary."""
    return (
        f"would stop {cost.idle_would_act} instance(s), would reclaim {cost.would_reclaim_gpu_hours:,.1f} "
        f"GPU-hours, ${cost.would_save_usd:,.2f}"
    )


def governor_cost_text(cost: CostSection) -> str | None:
    """ "The governor cost $X this period; it found $Y": its own bill beside the idle spend it found, the same words in
    HTML, Slack and email (docs/reports.md, "What the governor costs"); None when no sweep was recorded."""
    if cost.governor_cost_usd is None:
        return None
    outcome = (
        f"{money(cost.savings_usd)} reclaimed"
        if cost.idle_enforced or cost.savings_usd
        else f"{money(cost.would_save_usd)} to reclaim with idle.enforce on"
    )
    return (
        f"The governor cost {money(cost.governor_cost_usd)} this period; it found {money(cost.idle_cost_usd)} of idle "
        f"GPU spend ({outcome}). The cost is {cost.governor_cost_basis}."
    )


def energy_coverage(cost: CostSection) -> str:
    """How much of the idle GPU time the kWh covers: ``covers 100% of idle GPU-h``, or ``covers 115.0 of 323.0
    idle GPU-h: no draw known for NVIDIA GB200 (no public measurement of its idle draw)``; empty without idle time."""
    total = cost.idle_energy_gpu_hours or cost.idle_energy_unknown_gpu_hours
    if total <= 0:
        return ""
    left = cost.idle_energy_unknown_gpu_hours
    if left <= 0:
        return "covers 100% of idle GPU-h"
    models = "; ".join(f"{model} ({why})" if why else model for model, why in sorted(cost.idle_energy_left_out.items()))
    return f"covers {total - left:,.1f} of {total:,.1f} idle GPU-h: no draw known for {models or 'some models'}"


def energy_text(cost: CostSection) -> str:
    """The idle GPU time's energy in one phrase, the same in HTML, Slack and email (docs/reports.md, "GPU energy"):
    the kWh and CO2e, the share of idle GPU-hours they cover (what is left out and why) and the PUE and grid factors
    with their sources."""
    text = f"idle GPUs drew {cost.idle_energy_kwh:,.1f} kWh ({cost.idle_co2e_kg:,.1f} kg CO2e)"
    coverage = energy_coverage(cost)
    if coverage:
        text += f", {coverage}"
    if cost.energy_basis:
        text += f"; {cost.energy_basis}"
    return text


def at_stake_text(finding: FindingRow) -> str:
    """``, $412.80/day at stake`` for a finding whose resource keeps costing money while it stays open."""
    if not finding.usd_per_day:
        return ""
    return f", {per_day_text(finding.usd_per_day)} at stake"


def todo_items(report: Report, limit: int = 5, rest: str = "in findings.csv") -> list[str]:
    """What a reader should do today, in plain sentences, most urgent first (also used by Slack and email); ``rest``
    says where the findings beyond ``limit`` are (Slack: the full report, linked under the list)."""
    todo: list[str] = []
    for finding in report.open_findings[:limit]:
        who = f" ({finding.owner}, {finding.team})" if finding.owner != "unknown" or finding.team != "unknown" else ""
        todo.append(
            f"{finding.severity.capitalize()}: {finding.summary.rstrip('.')} on {finding.resource}{who}, "
            f"open {age_text(finding.first_seen, report.end)}{at_stake_text(finding)}. {finding.remediation}"
        )
    hidden = len(report.open_findings) - limit
    if hidden > 0:
        todo.append(f"…and {plural(hidden, 'more open finding')} {rest}.")
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
