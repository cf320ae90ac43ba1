"""Organisation mode: where each ledger item comes from (account, region), and spend per account and region."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from governor.domain import costs
from governor.domain.times import parse_time
from governor.report.model import Table

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
