"""Monthly budgets per team and per account: spend so far, burn per day, month-end forecast, and which alerts are
due."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from governor.domain import costs
from governor.policy import Policy
from governor.report.model import BudgetRow
from governor.report.sections.accounts import origin_of, origins


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
