"""Money: GPU-hours and dollars by team, owner and type; idle hours and savings; Spot interruptions; rightsizing.

The arithmetic is ``governor.domain.costs`` (shared with the CLI's ledger commands); this module turns it into the
report's tables.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from governor.domain import costs, interruptions
from governor.domain.times import parse_time
from governor.policy import Policy, PriceEntry
from governor.registry import REGISTRY
from governor.report.model import (
    ENERGY_COLUMNS,
    ENERGY_TITLE,
    OFFENDER_COLUMNS,
    PAID_UNUSED_COLUMNS,
    CostSection,
    SpotStats,
    Table,
)
from governor.report.sections.accounts import account_table
from governor.report.words import plural

UTILISATION_KEYS = ("max_gpu_utilization", "gpu_utilization_max", "max_utilization")


def utilisation_series(
    items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime
) -> dict[str, list[tuple[dt.datetime, float]]]:
    """Per instance, the busiest GPU's maximum utilisation at each idle sweep, from the idle decisions' evidence
    (the decisions of the capability recording idle GPU time: ``REGISTRY.idle_time()``)."""
    series: dict[str, list[tuple[dt.datetime, float]]] = defaultdict(list)
    idle_time = REGISTRY.idle_time()
    for item in items:
        if not idle_time.decided(item):
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
    book = prices or costs.PriceBook(policy.pricing)
    usage_items, source, notes = _usage(items, audit_hours, start)
    idle_time = REGISTRY.idle_time()
    idle = idle_time.hours(items, start, end)
    saved = idle_time.savings(items, start, end, book)
    offenders = idle_time.offenders(items, start, end, book)
    spend, unpriced = _spend(usage_items, offenders, start, end, book)
    if unpriced:
        notes.append(f"no price for {', '.join(unpriced)}: hours counted, dollars not")
    if saved.unpriced_instances:
        notes.append(
            f"{plural(saved.unpriced_instances, 'reclaimed instance')} without a price: their savings are not counted"
        )
    paid = idle_time.paid_unused(items, start, end, book)
    sources = _price_sources(saved, offenders)
    if sources:
        notes.append("savings priced at: " + "; ".join(f"{t} {s}" for t, s in sorted(sources.items())))
    notes.extend(book.effective_notes())
    if book.effective_error:
        notes.append(
            f"{book.effective_label} could not be read ({book.effective_error}): priced at the prices recorded with "
            "each usage session, else list prices"
        )
    coverage = book.coverage(policy.fleet.is_gpu_type)
    if coverage is None and book.coverage_error:
        notes.append(
            f"Savings Plans / RI coverage not shown: {book.effective_label} could not be read ({book.coverage_error})"
        )
    return CostSection(
        savings_plans_coverage_pct=coverage.savings_plans_pct if coverage else None,
        reserved_coverage_pct=coverage.reserved_hours_pct if coverage else None,
        coverage_source=f"Cost Explorer, {coverage.period}" if coverage else None,
        price_sources=sources,
        paid_unused_gpu_hours=round(sum(r.idle_gpu_hours for r in paid), 2),
        paid_unused_usd=round(sum(r.idle_usd for r in paid), 2),
        paid_unused=Table(
            name="paid_unused",
            title="Paid for, unused: idle reserved capacity",
            columns=list(PAID_UNUSED_COLUMNS),
            rows=[{c: getattr(r, c) for c in PAID_UNUSED_COLUMNS} for r in paid],
        ),
        source=source,
        **spend,
        **_idle_figures(idle, offenders),
        idle_enforced=_idle_enforced(items, policy, idle_time),
        savings_usd=round(saved.saved_usd, 2),
        spot=spot_section(items, start, end),
        rightsizing=rightsizing(items, policy, start, end, _instance_types(items, idle)),
        prices_as_of=policy.pricing.prices_as_of.isoformat(),
        notes=notes,
        by_account=account_table(items, usage_items, idle.instances, offenders, start, end, book),
        **energy_figures(items, offenders, idle_time),
        by_namespace=namespace_table(items, start, end),
    )


NAMESPACE_COLUMNS = ("cluster", "namespace", "team", "gpu_hours", "idle_gpu_hours", "allocated_but_idle", "pods")


def namespace_table(items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime) -> Table | None:
    """GPU-hours by EKS cluster and namespace, summed over the idle sweeps' ``idle.gpu-hours`` records (each covers
    its own sweep interval); a namespace is allocated but idle when every one of its GPU-hours was idle."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for item in items:
        if item.get("kind", "decision") != "decision" or item.get("rule") != "idle.gpu-hours":
            continue
        at = parse_time(item.get("at"))
        if at is None or not (start <= at < end):
            continue
        evidence = item.get("evidence") or {}
        for entry in evidence.get("namespaces") or []:
            namespace = entry.get("namespace") or "(no pod)"
            key = (str(evidence.get("cluster", "")), str(namespace))
            row = rows.setdefault(
                key,
                {"team": entry.get("team") or "", "gpu_hours": 0.0, "idle_gpu_hours": 0.0, "pods": set()},
            )
            row["gpu_hours"] += float(entry.get("gpu_hours") or 0)
            row["idle_gpu_hours"] += float(entry.get("idle_gpu_hours") or 0)
            row["pods"].update(entry.get("pods") or [])
    if not rows:
        return None
    return Table(
        name="gpu_hours_by_namespace",
        title="EKS GPU-hours by namespace (DCGM pod labels)",
        columns=list(NAMESPACE_COLUMNS),
        rows=[
            {
                "cluster": cluster,
                "namespace": namespace,
                "team": row["team"],
                "gpu_hours": round(row["gpu_hours"], 2),
                "idle_gpu_hours": round(row["idle_gpu_hours"], 2),
                "allocated_but_idle": namespace != "(no pod)" and row["idle_gpu_hours"] >= row["gpu_hours"] > 0,
                "pods": ", ".join(sorted(row["pods"])),
            }
            for (cluster, namespace), row in sorted(rows.items(), key=lambda kv: -kv[1]["gpu_hours"])
        ],
    )


def energy_figures(
    items: Sequence[Mapping[str, Any]], offenders: Sequence[costs.OffenderRow], idle_time: costs.IdleTime
) -> dict[str, Any]:
    """The kWh and kg CO2e of the period's idle GPU time (``idle_time.energy``), and the per-model table."""
    regions = {str(s.get("instance_id")): s.get("region") for s in costs.sessions_of(items) if s.get("region")}
    used = idle_time.energy(offenders, regions)
    return {
        "idle_energy_kwh": used.kwh,
        "idle_co2e_kg": used.co2e_kg,
        "idle_energy_unknown_gpu_hours": used.unknown_gpu_hours,
        "idle_energy_by_instance": used.by_instance,
        "idle_energy_gpu_hours": used.gpu_hours,
        "idle_energy_left_out": used.left_out,
        "idle_energy_hours_by_instance": used.hours_by_instance,
        "idle_energy_left_out_by_instance": used.left_out_by_instance,
        "energy_basis": used.basis,
        "energy": Table(name="idle_energy", title=ENERGY_TITLE, columns=list(ENERGY_COLUMNS), rows=used.by_model),
    }


def _price_sources(saved: costs.Savings, offenders: Iterable[costs.OffenderRow]) -> dict[str, str]:
    """Per instance type, the source of the rate its savings (and would-be savings) figures used."""
    found: dict[str, str] = {}
    for row in saved.instances:
        if row.instance_type and row.price_source:
            found.setdefault(row.instance_type, row.price_source)
    for offender in offenders:
        if offender.would_reclaim_usd or offender.reclaimed_usd:
            found.setdefault(offender.instance_type, offender.price_source)
    return found


def _usage(
    items: Sequence[Mapping[str, Any]], audit_hours: Iterable[Mapping[str, Any]], start: dt.datetime
) -> tuple[list[Mapping[str, Any]], str, list[str]]:
    """The items usage is counted from, where the sessions came from, and the note that says so when not the ledger."""
    usage_items: list[Mapping[str, Any]] = list(items)
    if costs.sessions_of(items):
        return usage_items, "ledger", []
    from_audit = _sessions_from_audit(audit_hours, start)
    if not from_audit:
        return usage_items, "ledger", []
    note = "GPU-hours from CloudTrail launches and stops (the ledger holds no usage sessions)"
    return usage_items + from_audit, "cloudtrail", [note]


def _spend(
    usage_items: Sequence[Mapping[str, Any]],
    offenders: Iterable[costs.OffenderRow],
    start: dt.datetime,
    end: dt.datetime,
    book: costs.PriceBook,
) -> tuple[dict[str, Any], list[str]]:
    """The spend tables (by team and owner with their idle dollars, by type) and totals; and the unpriced types."""
    by_team = costs.gpu_hours_and_cost(usage_items, start, end, "team", book)
    by_owner = costs.gpu_hours_and_cost(usage_items, start, end, "owner", book)
    by_type = costs.gpu_hours_and_cost(usage_items, start, end, "instance_type", book)
    idle_by_team: dict[str, float] = defaultdict(float)
    idle_by_owner: dict[str, float] = defaultdict(float)
    for offender in offenders:
        idle_by_team[offender.team] += offender.idle_usd
        idle_by_owner[offender.owner] += offender.idle_usd
    spend = {
        "gpu_hours_total": round(sum(r.gpu_hours for r in by_team), 2),
        "cost_total_usd": round(sum(r.cost_usd for r in by_team), 2),
        "by_team": _cost_table("gpu_hours_by_team", "Spend by team", "team", by_team, idle_by_team),
        "by_owner": _cost_table("gpu_hours_by_owner", "Spend by owner", "owner", by_owner, idle_by_owner),
        "by_type": _cost_table("gpu_hours_by_type", "Spend by instance type", "instance_type", by_type),
    }
    return spend, sorted(r.key for r in by_type if r.unpriced_sessions)


def _idle_figures(idle: costs.IdleSummary, offenders: Sequence[costs.OffenderRow]) -> dict[str, Any]:
    """Idle GPU-hours and dollars, detected, reclaimed and (report-only) would-reclaim, and the offenders' table."""
    return {
        "idle_cost_usd": round(sum(o.idle_usd for o in offenders), 2),
        "would_reclaim_gpu_hours": round(sum(r.would_reclaim_gpu_hours for r in idle.instances), 2),
        "would_save_usd": round(sum(o.would_reclaim_usd for o in offenders), 2),
        "offenders": Table(
            name="idle_offenders",
            title="Top idle offenders",
            columns=list(OFFENDER_COLUMNS),
            rows=[{c: getattr(o, c) for c in OFFENDER_COLUMNS} for o in offenders],
        ),
        "idle_gpu_hours_detected": round(idle.detected_gpu_hours, 2),
        "idle_gpu_hours_reclaimed": round(idle.reclaimed_gpu_hours, 2),
        "idle_instances_detected": sum(1 for r in idle.instances if r.idle_hours > 0),
        "idle_actions": sum(1 for r in idle.instances if r.reclaimed_hours > 0),
        "idle_would_act": sum(1 for r in idle.instances if r.would_reclaim_hours > 0),
        "would_reclaim_gpu_hours_by_team": _would_by_team(idle.instances, offenders),
    }


def _instance_types(items: Iterable[Mapping[str, Any]], idle: costs.IdleSummary) -> dict[str, str]:
    """Instance id -> type, from the usage sessions and the idle decisions, for rightsizing's suggestions."""
    types = {s.get("instance_id"): s.get("instance_type") for s in costs.sessions_of(items)}
    types.update({r.instance_id: r.instance_type for r in idle.instances if r.instance_type})
    return {str(k): str(v) for k, v in types.items() if k and v}


def _would_by_team(rows: Iterable[costs.IdleRow], offenders: Iterable[costs.OffenderRow]) -> dict[str, float]:
    teams = {o.instance_id: o.team for o in offenders}
    found: dict[str, float] = defaultdict(float)
    for row in rows:
        if row.would_reclaim_gpu_hours > 0:
            found[teams.get(row.instance_id, "unknown")] += row.would_reclaim_gpu_hours
    return {team: round(hours, 2) for team, hours in sorted(found.items())}


def _idle_enforced(items: Iterable[Mapping[str, Any]], policy: Policy, idle_time: costs.IdleTime) -> bool:
    """Whether idle stops were really done: the latest idle stop/terminate decision says; without one, the policy.

    The ledger is the better witness (the report function's environment carries no idle section, and a policy
    switched on mid-period should not relabel what was report-only).
    """
    latest: tuple[str, bool] | None = None
    for item in items:
        if not idle_time.decided(item):
            continue
        for action in item.get("actions") or []:
            if isinstance(action, Mapping) and action.get("type") in costs.RECLAIM_ACTIONS:
                stamp = str(item.get("at", ""))
                if latest is None or stamp >= latest[0]:
                    latest = (stamp, bool(action.get("enforced")))
    return latest[1] if latest is not None else REGISTRY.recording_idle_time().enforces(policy)


def spot_section(items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime) -> SpotStats:
    """Interruptions in the period (``domain.interruptions`` records), rebalance recommendations, checkpoints."""
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
        suggestion = _smaller_type(instance_type, peak, policy.pricing.prices)
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
