"""Idle GPU time in hours and dollars, read from the idle function's own decision records: what the report's idle
figures (detected, reclaimed, would-reclaim, offenders, paid-for-but-unused capacity) and the fleet chart's idle band
are made of. Pure; works on plain ledger items like ``governor.domain.costs``, whose price book and figure types it
uses.

Record shape read here (see docs/lifecycle.md): an idle decision (``kind="decision"``, ``policy="idle"``, recorded
by ``DynamoLedger.record``): ``verdict``, ``resource`` (instance id), ``at``, ``actions`` (``type`` stop|terminate
with ``enforced``), ``evidence`` with ``status`` (idle|warned|checkpoint|acted|held: the instance was judged idle),
``window_start`` / ``window_end`` and ``idle_since`` (ISO 8601; or ``window_minutes``), optionally
``instance_type`` and ``gpus``; and the usage sessions of ``governor.domain.costs``.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from governor.domain import gpus as gpu_facts
from governor.domain.costs import (
    RECLAIM_ACTIONS,
    UNKNOWN,
    IdleEnergy,
    IdleRow,
    IdleSummary,
    IdleTime,
    OffenderRow,
    PaidUnusedRow,
    PriceBook,
    Savings,
    SavingsRow,
    _clip,
    _hours,
    _merge,
    _sessions_by_instance,
    instance_price,
    savings_rate,
)
from governor.domain.facts import reservation_price
from governor.domain.identity import normalise_owner
from governor.domain.times import parse_time
from governor.idle import energy

# ``evidence.status`` values of idle decisions whose assessment said idle (see governor.idle.domain).
IDLE_STATUSES = frozenset({"idle", "warned", "checkpoint", "acted", "held", "reported"})


def _idle_decisions(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Idle-policy decisions whose assessment was "idle" (``evidence.status``), or ``act`` ones without a status."""
    found = []
    for item in items:
        if item.get("kind") != "decision" or item.get("policy") != "idle":
            continue
        status = (item.get("evidence") or {}).get("status")
        if status in IDLE_STATUSES or (status is None and item.get("verdict") == "act"):
            found.append(item)
    return found


def _idle_interval(decision: Mapping[str, Any]) -> tuple[dt.datetime, dt.datetime] | None:
    """From the earliest of ``idle_since``, ``window_start``, ``end - window_minutes`` to ``window_end`` (or ``at``)."""
    at = parse_time(decision.get("at"))
    evidence = decision.get("evidence") or {}
    finish = parse_time(evidence.get("window_end")) or at
    if finish is None:
        return None
    starts = [t for t in (parse_time(evidence.get("idle_since")), parse_time(evidence.get("window_start"))) if t]
    minutes = evidence.get("window_minutes")
    if isinstance(minutes, int | float) and not isinstance(minutes, bool) and minutes > 0:
        starts.append(finish - dt.timedelta(minutes=float(minutes)))
    if not starts:
        return None
    begin = min(starts)
    return (begin, finish) if finish > begin else None


def _reclaim_time(decision: Mapping[str, Any], enforced: bool = True) -> dt.datetime | None:
    """When a stop/terminate was done (``enforced``) or, report-only, when it would have been done."""
    for action in decision.get("actions") or []:
        if (
            isinstance(action, Mapping)
            and action.get("type") in RECLAIM_ACTIONS
            and bool(action.get("enforced")) is enforced
        ):
            return parse_time(action.get("at")) or parse_time(decision.get("at"))
    return None


def _would_reclaim_time(decision: Mapping[str, Any]) -> dt.datetime | None:
    """When a report-only policy decided to stop/terminate: an ``acted`` decision whose reclaim action was not enforced.

    Held decisions (over the blast radius) do not count: an enforcing policy would not have acted on them either.
    """
    if (decision.get("evidence") or {}).get("status") != "acted":
        return None
    return _reclaim_time(decision, enforced=False)


def _busy_times(items: Iterable[Mapping[str, Any]]) -> dict[str, list[dt.datetime]]:
    """Per instance, when an idle sweep judged it not idle (working, or no data): a report-only stop would have been
    undone by its owner then, so the hours it would have given back end there."""
    found: dict[str, list[dt.datetime]] = defaultdict(list)
    for item in items:
        if item.get("kind") != "decision" or item.get("policy") != "idle":
            continue
        status = (item.get("evidence") or {}).get("status")
        at = parse_time(item.get("at"))
        if status is not None and status not in IDLE_STATUSES and at is not None:
            found[str(item.get("resource"))].append(at)
    return found


def idle_windows(items: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[dt.datetime, dt.datetime]]]:
    """Per instance, the merged windows the idle policy judged idle (the "idle" band of the fleet chart)."""
    windows: dict[str, list[tuple[dt.datetime, dt.datetime]]] = defaultdict(list)
    for decision in _idle_decisions(items):
        window = _idle_interval(decision)
        if window:
            windows[str(decision.get("resource"))].append(window)
    return {instance: _merge(found) for instance, found in windows.items()}


def _instance_facts(decisions: list[Mapping[str, Any]], sessions: list[Mapping[str, Any]]) -> tuple[str | None, float]:
    """Type and GPUs of one instance: from the idle evidence, else its latest session, else the type's GPU facts
    (0.125 for a ``g6f.large``: its idle GPU-hours are an eighth of its idle hours)."""
    for decision in decisions:
        evidence = decision.get("evidence") or {}
        if evidence.get("instance_type"):
            kind = str(evidence["instance_type"])
            return kind, float(evidence.get("gpus") or _session_gpus(sessions) or gpu_facts.gpu_count(kind))
    latest = max(sessions, key=lambda s: str(s.get("start", "")), default=None)
    if latest is None:
        return None, 1.0
    named = str(latest.get("instance_type") or "") or None
    return named, float(latest.get("gpus") or (gpu_facts.gpu_count(named) if named else 1.0))


def _session_gpus(sessions: list[Mapping[str, Any]]) -> float | None:
    return next((float(s["gpus"]) for s in sessions if s.get("gpus")), None)


def _clipped_hours(windows: list[tuple[dt.datetime, dt.datetime]], start: dt.datetime, end: dt.datetime) -> float:
    """Hours of the merged ``windows`` inside [start, end)."""
    hours = 0.0
    for begin, finish in _merge(windows):
        clipped = _clip(begin, finish, start, end)
        hours += _hours(*clipped) if clipped else 0.0
    return hours


def _reclaim_windows(
    decisions: list[Mapping[str, Any]], sessions: list[Mapping[str, Any]], end: dt.datetime
) -> list[tuple[dt.datetime, dt.datetime]]:
    """From each enforced stop/terminate until the instance's next usage session starts (or ``end``)."""
    starts = sorted(t for t in (parse_time(s.get("start")) for s in sessions) if t)
    windows = []
    for decision in decisions:
        stopped_at = _reclaim_time(decision)
        if stopped_at is None:
            continue
        restart = next((t for t in starts if t > stopped_at), None)
        windows.append((stopped_at, restart or end))
    return windows


def _would_windows(
    decisions: list[Mapping[str, Any]], busy: list[dt.datetime], sessions: list[Mapping[str, Any]], end: dt.datetime
) -> list[tuple[dt.datetime, dt.datetime]]:
    """From each report-only stop/terminate decision until the instance is next judged not idle, its session ends,
    or ``end``."""
    windows = []
    for decision in decisions:
        decided_at = _would_reclaim_time(decision)
        if decided_at is None:
            continue
        stops = [t for t in busy if t > decided_at]
        stops += [t for t in (parse_time(s.get("end")) for s in sessions) if t and t > decided_at]
        windows.append((decided_at, min(stops, default=end)))
    return windows


def _idle_row(
    instance_id: str,
    decisions: list[Mapping[str, Any]],
    sessions: list[Mapping[str, Any]],
    busy: list[dt.datetime],
    start: dt.datetime,
    end: dt.datetime,
) -> IdleRow:
    """One instance's idle, reclaimed and would-reclaim hours in [start, end), and in GPU-hours."""
    instance_type, gpus = _instance_facts(decisions, sessions)
    idle = _clipped_hours([w for w in map(_idle_interval, decisions) if w], start, end)
    reclaimed = _clipped_hours(_reclaim_windows(decisions, sessions, end), start, end)
    would = _clipped_hours(_would_windows(decisions, busy, sessions, end), start, end)
    return IdleRow(
        instance_id=instance_id,
        instance_type=instance_type,
        gpus=gpus,
        idle_hours=round(idle, 4),
        idle_gpu_hours=round(idle * gpus, 4),
        reclaimed_hours=round(reclaimed, 4),
        reclaimed_gpu_hours=round(reclaimed * gpus, 4),
        would_reclaim_hours=round(would, 4),
        would_reclaim_gpu_hours=round(would * gpus, 4),
    )


def idle_hours(items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime) -> IdleSummary:
    """Idle GPU-hours detected and reclaimed in [start, end), from idle decisions and usage sessions.

    Detected: the union, per instance, of the windows the idle policy judged idle (``act`` decisions).
    Reclaimed: from an enforced stop/terminate until the instance's next usage session starts (or ``end``).
    Would reclaim: from a report-only stop/terminate decision until the instance is next judged not idle, its
    session ends, or ``end``: what the same decision, enforced, would have given back.
    """
    items = list(items)
    sessions = _sessions_by_instance(items)
    busy = _busy_times(items)
    by_instance: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for decision in _idle_decisions(items):
        by_instance[str(decision.get("resource"))].append(decision)
    rows = [
        _idle_row(instance_id, decisions, sessions.get(instance_id, []), busy.get(instance_id, []), start, end)
        for instance_id, decisions in sorted(by_instance.items())
    ]
    return IdleSummary(
        detected_hours=round(sum(r.idle_hours for r in rows), 4),
        detected_gpu_hours=round(sum(r.idle_gpu_hours for r in rows), 4),
        reclaimed_hours=round(sum(r.reclaimed_hours for r in rows), 4),
        reclaimed_gpu_hours=round(sum(r.reclaimed_gpu_hours for r in rows), 4),
        instances=rows,
        would_reclaim_hours=round(sum(r.would_reclaim_hours for r in rows), 4),
        would_reclaim_gpu_hours=round(sum(r.would_reclaim_gpu_hours for r in rows), 4),
    )


def idle_offenders(
    items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime, prices: PriceBook | None = None
) -> list[OffenderRow]:
    """Every instance with idle time, costliest first: idle, reclaimed and would-reclaim dollars at its price.

    Owner and team come from the instance's latest session (owner normalised); an unpriced instance has 0 dollars
    and ``priced`` false, so the report can say so instead of guessing.
    """
    items = list(items)
    sessions = _sessions_by_instance(items)
    rows = []
    for row in idle_hours(items, start, end).instances:
        if row.idle_hours <= 0 and row.reclaimed_hours <= 0 and row.would_reclaim_hours <= 0:
            continue
        own = sorted(sessions.get(row.instance_id, []), key=lambda s: str(s.get("start", "")))
        price = instance_price(row.instance_id, row.instance_type, own, prices)
        on_demand, source = savings_rate(row.instance_type, own, prices, row.instance_id)
        latest = own[-1] if own else {}
        rows.append(
            OffenderRow(
                instance_id=row.instance_id,
                instance_type=row.instance_type or UNKNOWN,
                owner=normalise_owner(latest.get("owner")),
                team=str(latest.get("team") or UNKNOWN),
                idle_gpu_hours=row.idle_gpu_hours,
                idle_usd=round(row.idle_hours * price, 2) if price is not None else 0.0,
                reclaimed_usd=round(row.reclaimed_hours * on_demand, 2) if on_demand is not None else 0.0,
                would_reclaim_usd=round(row.would_reclaim_hours * on_demand, 2) if on_demand is not None else 0.0,
                priced=price is not None,
                price_source=source,
            )
        )
    return sorted(rows, key=lambda r: (-r.idle_usd, -r.would_reclaim_usd, -r.idle_gpu_hours, r.instance_id))


def savings(
    items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime, prices: PriceBook | None = None
) -> Savings:
    """Reclaimed hours (and, for report-only policies, would-reclaim hours) times the on-demand price, in [start, end).

    The price is the one recorded on the instance's last session, else ``prices``; instances with neither are
    counted as unpriced rather than guessed.
    """
    items = list(items)
    sessions = _sessions_by_instance(items)
    rows: list[SavingsRow] = []
    unpriced = 0
    for row in idle_hours(items, start, end).instances:
        if row.reclaimed_hours <= 0 and row.would_reclaim_hours <= 0:
            continue
        price, source = savings_rate(row.instance_type, sessions.get(row.instance_id, []), prices, row.instance_id)
        if price is None:
            unpriced += 1
        rows.append(
            SavingsRow(
                instance_id=row.instance_id,
                instance_type=row.instance_type,
                reclaimed_hours=row.reclaimed_hours,
                on_demand_per_hour=price,
                price_source=source,
                saved_usd=round(row.reclaimed_hours * price, 2) if price is not None else 0.0,
                would_reclaim_hours=row.would_reclaim_hours,
                would_save_usd=round(row.would_reclaim_hours * price, 2) if price is not None else 0.0,
            )
        )
    return Savings(
        reclaimed_hours=round(sum(r.reclaimed_hours for r in rows), 4),
        saved_usd=round(sum(r.saved_usd for r in rows), 2),
        unpriced_instances=unpriced,
        instances=sorted(rows, key=lambda r: (-r.saved_usd, -r.would_save_usd, r.instance_id)),
        would_reclaim_hours=round(sum(r.would_reclaim_hours for r in rows), 4),
        would_save_usd=round(sum(r.would_save_usd for r in rows), 2),
    )


def _latest_purchase(decisions: Iterable[Mapping[str, Any]]) -> Mapping[str, Any]:
    latest: tuple[str, Mapping[str, Any]] = ("", {})
    for decision in decisions:
        purchase = (decision.get("evidence") or {}).get("purchase")
        if isinstance(purchase, Mapping) and str(decision.get("at", "")) >= latest[0]:
            latest = (str(decision.get("at", "")), purchase)
    return latest[1]


def paid_unused(
    items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime, prices: PriceBook | None = None
) -> list[PaidUnusedRow]:
    """Idle GPU-hours of instances whose idle decisions recorded a paid-for purchase model (``evidence.purchase``),
    with the reservation and its end; dollars at the instance's recorded price (what the hour cost, used or not)."""
    from governor.domain.capacity import PAID_FOR

    items = list(items)
    by_instance: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for decision in _idle_decisions(items):
        by_instance[str(decision.get("resource"))].append(decision)
    paid = {i: _latest_purchase(d) for i, d in by_instance.items()}
    paid = {i: p for i, p in paid.items() if p.get("kind") in PAID_FOR}
    if not paid:
        return []
    sessions = _sessions_by_instance(items)
    rows = []
    for row in idle_hours(items, start, end).instances:
        purchase = paid.get(row.instance_id)
        if purchase is None or row.idle_hours <= 0:
            continue
        own = sorted(sessions.get(row.instance_id, []), key=lambda s: str(s.get("start", "")))
        price = instance_price(row.instance_id, row.instance_type, own, prices)
        rows.append(
            PaidUnusedRow(
                instance_id=row.instance_id,
                instance_type=row.instance_type or UNKNOWN,
                purchase=str(purchase.get("kind")),
                reservation_id=str(purchase.get("reservation_id") or UNKNOWN),
                ends_at=str(purchase.get("ends_at") or UNKNOWN),
                idle_hours=row.idle_hours,
                idle_gpu_hours=row.idle_gpu_hours,
                idle_usd=round(row.idle_hours * price, 2) if price is not None else 0.0,
                priced=price is not None,
            )
        )
    return sorted(rows, key=lambda r: (-r.idle_gpu_hours, r.instance_id))


def _unused_sweeps(
    items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime
) -> tuple[dict[str, float], dict[str, Mapping[str, Any]]]:
    """Per reservation, its unused instance-hours in [start, end) (each sweep counts its unused instances for one
    interval) and its latest decision."""
    from governor.domain.capacity import UNUSED_STATUS

    hours: dict[str, float] = defaultdict(float)
    latest: dict[str, Mapping[str, Any]] = {}
    for item in items:
        evidence = item.get("evidence") or {}
        if item.get("kind") != "decision" or item.get("policy") != "idle" or evidence.get("status") != UNUSED_STATUS:
            continue
        at = parse_time(evidence.get("judged_at") or item.get("at"))  # the sweep's clock, not the write's
        if at is None or not start <= at < end:
            continue
        rid = str(item.get("resource"))
        hours[rid] += int(evidence.get("unused_instances") or 0) * float(evidence.get("interval_minutes") or 15) / 60
        if rid not in latest or at >= (parse_time((latest[rid].get("evidence") or {}).get("judged_at")) or at):
            latest[rid] = item
    return hours, latest


def _reservation_row(rid: str, item: Mapping[str, Any], hours: float, prices: PriceBook | None) -> PaidUnusedRow:
    """One reservation's unused hours, GPU-hours and dollars (a Capacity Block's fee is prepaid: not priced)."""
    evidence = item.get("evidence") or {}
    purchase = evidence.get("purchase") or {}
    instance_type = str(evidence.get("instance_type") or UNKNOWN)
    per_hour = reservation_price(evidence, prices).usd_per_hour  # the rate its finding's "at stake" uses
    gpus = prices.price(instance_type).gpus if prices is not None else 1
    unused = int(evidence.get("unused_instances") or 0)
    return PaidUnusedRow(
        instance_id=f"(none: {unused} of {evidence.get('total_instances', '?')} unused)",
        instance_type=instance_type,
        purchase=str(purchase.get("kind") or "capacity-reservation"),
        reservation_id=rid,
        ends_at=str(purchase.get("ends_at") or UNKNOWN),
        idle_hours=round(hours, 2),
        idle_gpu_hours=round(hours * gpus, 2),
        idle_usd=round(hours * float(per_hour), 2) if per_hour is not None else 0.0,
        priced=per_hour is not None,
        owner=normalise_owner(evidence.get("owner")),  # the one name its finding and messages give the owner
        usd_per_day=round(float(per_hour) * 24 * unused, 2) if per_hour is not None else None,
    )


def unused_reservations(
    items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime, prices: PriceBook | None = None
) -> list[PaidUnusedRow]:
    """Capacity reservations with capacity no instance ran in, from the idle sweep's decisions about them
    (``evidence.status`` ``unused-capacity``): each sweep in the period counts its unused instances for one sweep
    interval. Dollars at the rate the account pays for the type (an On-Demand Capacity Reservation is billed at the
    On-Demand rate, less any Savings Plan or RI that covers it); a Capacity Block's fee is prepaid and not reported by
    EC2, so its hours are counted and its dollars are not."""
    hours, latest = _unused_sweeps(items, start, end)
    rows = [_reservation_row(rid, item, hours[rid], prices) for rid, item in latest.items()]
    return sorted(rows, key=lambda r: (-r.idle_gpu_hours, r.reservation_id))


def idle_energy(offenders: Sequence[OffenderRow], regions: Mapping[str, Any]) -> IdleEnergy:
    """The kWh and kg CO2e of the offenders' idle GPU time (``governor.idle.energy``), and the per-model rows."""
    used = energy.idle_energy(
        (o.instance_id, o.instance_type, o.idle_gpu_hours, regions.get(o.instance_id)) for o in offenders
    )
    rows = []
    for model, (gpu_hours, kwh) in sorted(used.by_model.items(), key=lambda m: -(m[1][1] or 0.0)):
        draw = energy.draw_of(model)
        rows.append(
            {
                "gpu_model": model,
                "idle_gpu_hours": round(gpu_hours, 2),
                "idle_watts": draw.idle_watts if draw else None,
                "busy_watts": draw.busy_watts if draw else None,
                "idle_kwh": round(kwh, 2) if kwh is not None else None,
                "draw_source": energy.source_label(draw),
            }
        )
    return IdleEnergy(
        used.kwh,
        used.co2e_kg,
        used.unknown_gpu_hours,
        used.by_instance,
        rows,
        gpu_hours=used.gpu_hours,
        left_out=used.left_out,
        hours_by_instance=used.hours_by_instance,
        left_out_by_instance=used.left_out_by_instance,
        basis=energy.basis(),
    )


def _paid_unused(
    items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime, prices: PriceBook | None = None
) -> list[PaidUnusedRow]:
    """Idle paid-for instances, then reservations with capacity no instance ran in."""
    items = list(items)
    return paid_unused(items, start, end, prices) + unused_reservations(items, start, end, prices)


#: The idle function's decisions are the fleet's idle GPU time (its registry entry's ``idle_time``).
IDLE_TIME = IdleTime(
    policies=frozenset({"idle"}),
    hours=idle_hours,
    savings=savings,
    offenders=idle_offenders,
    paid_unused=_paid_unused,
    windows=idle_windows,
    energy=idle_energy,
)
