"""Prices, GPU-hours and dollars: per usage session, and over ledger items for the reports.

Everything here is pure and works on plain ledger items (dicts, as ``DynamoLedger`` stores them and as
``governor ledger export`` writes them), so the report Lambda and ``governor report --ledger FILE`` share it.

Record shapes read here (see docs/lifecycle.md):

- usage session (``kind="session"``, written by the lifecycle function): ``instance_id``, ``instance_type``,
  ``gpus``, ``lifecycle`` (on-demand|spot), ``zone``, ``team``, ``owner``, ``start``, ``end`` (ISO 8601; ``end``
  null while open), ``price_per_hour`` (USD per instance-hour, null when unpriced), ``on_demand_per_hour``.
- idle decision (``kind="decision"``, ``policy="idle"``, recorded by ``DynamoLedger.record``): ``verdict``,
  ``resource`` (instance id), ``at``, ``actions`` (``type`` stop|terminate with ``enforced``), ``evidence`` with
  ``status`` (idle|warned|checkpoint|acted|held: the instance was judged idle), ``window_start`` /
  ``window_end`` and ``idle_since`` (ISO 8601; or ``window_minutes``), optionally ``instance_type`` and ``gpus``.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from governor.domain.identity import normalise_owner
from governor.domain.times import parse_time
from governor.policy import PricingPolicy

GroupBy = Literal["team", "owner", "instance_type"]
UNKNOWN = "unknown"
RECLAIM_ACTIONS = frozenset({"stop", "terminate"})
# ``evidence.status`` values of idle decisions whose assessment said idle (see governor.idle.domain).
IDLE_STATUSES = frozenset({"idle", "warned", "checkpoint", "acted", "held", "reported"})


class OnDemandPrices(Protocol):
    """A live price source (the AWS Price List API adapter): USD per hour and GPU count, or None if unknown."""

    def on_demand(self, instance_type: str, region: str) -> tuple[float, int | None] | None: ...


@dataclass(frozen=True)
class EffectiveRate:
    """What an instance-hour of a type actually cost the account (Savings Plans, RIs, blocks amortised), and where
    the figure came from (``source``, shown beside every figure priced with it)."""

    per_hour: float
    source: str


#: How effective-rate sources name themselves (``EffectiveRate.source``): a figure from one is what was actually paid.
EFFECTIVE_SOURCES = ("CUR 2.0", "Cost Explorer")


@dataclass(frozen=True)
class Coverage:
    """The GPU fleet's Savings Plans coverage (% of spend) and Reserved Instance coverage (% of running hours)."""

    savings_plans_pct: float | None
    reserved_hours_pct: float | None
    period: str


class EffectiveRates(Protocol):
    """A source of effective rates by instance type (``governor.adapters.cost_explorer``, ``governor.adapters.cur``)."""

    def rate(self, instance_type: str, instance_id: str | None = None) -> EffectiveRate | None: ...


@dataclass(frozen=True)
class HourlyPrice:
    """What one instance-hour of a type costs under its purchase option, and where the figure came from."""

    instance_type: str
    per_hour: float | None
    on_demand: float | None
    gpus: int
    basis: str
    as_of: str | None = None

    @property
    def priced(self) -> bool:
        return self.per_hour is not None


class PriceBook:
    """The policy's price table, optionally overridden for on-demand prices by the Price List API.

    Spot has no list price, so Spot sessions use the table's typical Spot price, or the on-demand price (an upper
    bound) when the table has none. Types in neither source are unpriced: hours are counted, dollars are not.
    """

    def __init__(
        self,
        policy: PricingPolicy,
        *,
        region: str | None = None,
        price_list: OnDemandPrices | None = None,
        effective: EffectiveRates | None = None,
    ) -> None:
        self._policy = policy
        self._region = region or "us-east-1"
        self._price_list = price_list if policy.use_price_list_api else None
        self._effective = effective
        self._cache: dict[str, tuple[float, int | None] | None] = {}
        #: Why the effective-rate source gave nothing (a failed read is a note, never a guess).
        self.effective_error: str | None = None
        self.coverage_error: str | None = None

    @property
    def has_effective(self) -> bool:
        return self._effective is not None

    def effective_notes(self) -> list[str]:
        """What the effective-rate source has to say (a CUR table that could not be read, and what was used)."""
        notes = getattr(self._effective, "notes", None)
        return list(notes()) if notes is not None else []

    def coverage(self, is_gpu: Any) -> Coverage | None:
        """Savings Plans / RI coverage of the GPU fleet from the effective-rate source, when it offers it; None
        without one. A failed read is recorded in ``coverage_error`` and returns None."""
        read = getattr(self._effective, "coverage", None)
        if read is None:
            return None
        try:
            found: Coverage = read(is_gpu)
        except Exception as error:  # Cost Explorer off, throttled or denied: the report says so
            self.coverage_error = f"{type(error).__name__}: {error}"
            return None
        return found

    def paid(self, instance_type: str, instance_id: str | None = None) -> tuple[float | None, str]:
        """USD per instance-hour at the price the account pays, and its source, in order of truth: the effective
        rate (the instance's own from the CUR 2.0 table, else Cost Explorer's amortised cost for the type) when
        configured and known, else the on-demand chain (Price List API, then the policy's table)."""
        if self._effective is not None and self.effective_error is None:
            try:
                found = self._effective.rate(instance_type, instance_id)
            except Exception as error:  # Cost Explorer off, throttled or denied: fall back, and say so
                self.effective_error = f"{type(error).__name__}: {error}"
                found = None
            if found is not None:
                return found.per_hour, found.source
        price = self.price(instance_type, "on-demand")
        return price.on_demand, price.basis + (f" (as of {price.as_of})" if price.as_of else "")

    def _listed(self, instance_type: str) -> tuple[float, int | None] | None:
        if self._price_list is None:
            return None
        if instance_type not in self._cache:
            self._cache[instance_type] = self._price_list.on_demand(instance_type, self._region)
        return self._cache[instance_type]

    def price(self, instance_type: str, lifecycle: str = "on-demand") -> HourlyPrice:
        """The hourly price of ``instance_type`` for ``lifecycle`` (``on-demand`` or ``spot``)."""
        entry = self._policy.prices.get(instance_type)
        as_of: str | None = self._policy.prices_as_of.isoformat()
        listed = self._listed(instance_type)
        if listed is not None:
            on_demand: float | None = listed[0]
            gpus = entry.gpus if entry else (listed[1] or 1)
            source = "price list"
            as_of = None
        elif entry is not None:
            on_demand, gpus, source = entry.on_demand, entry.gpus, "table"
        else:
            return HourlyPrice(instance_type, None, None, 1, "unpriced (not in the price table; 1 GPU assumed)")
        if lifecycle == "spot":
            if entry is not None and entry.spot is not None:
                table_date = self._policy.prices_as_of.isoformat()
                return HourlyPrice(instance_type, entry.spot, on_demand, gpus, "table spot", table_date)
            return HourlyPrice(instance_type, on_demand, on_demand, gpus, f"{source} on-demand (no spot price)", as_of)
        return HourlyPrice(instance_type, on_demand, on_demand, gpus, f"{source} on-demand", as_of)


def _hours(start: dt.datetime, end: dt.datetime) -> float:
    return max((end - start).total_seconds(), 0.0) / 3600.0


def _clip(
    start: dt.datetime, end: dt.datetime | None, lo: dt.datetime, hi: dt.datetime
) -> tuple[dt.datetime, dt.datetime] | None:
    """The part of [start, end) inside [lo, hi); an open interval (end None) runs to ``hi``."""
    begin = max(start, lo)
    finish = min(end or hi, hi)
    return (begin, finish) if finish > begin else None


@dataclass(frozen=True)
class SessionUsage:
    """One session's share of a period: instance-hours, GPU-hours and estimated dollars."""

    hours: float
    gpu_hours: float
    cost_usd: float | None


def session_usage(session: Mapping[str, Any], start: dt.datetime, end: dt.datetime) -> SessionUsage:
    """Hours of ``session`` inside [start, end) times its GPUs and hourly price; an open session runs to ``end``."""
    began = parse_time(session.get("start"))
    if began is None:
        return SessionUsage(0.0, 0.0, 0.0)
    window = _clip(began, parse_time(session.get("end")), start, end)
    if window is None:
        return SessionUsage(0.0, 0.0, 0.0)
    hours = _hours(*window)
    gpus = int(session.get("gpus") or 1)
    price = session.get("price_per_hour")
    return SessionUsage(hours, hours * gpus, hours * float(price) if price is not None else None)


@dataclass(frozen=True)
class CostRow:
    """One line of the cost table: a team, owner or instance type over the period."""

    key: str
    sessions: int
    instance_hours: float
    gpu_hours: float
    cost_usd: float
    unpriced_sessions: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sessions_of(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [item for item in items if item.get("kind") == "session"]


def fill_price(session: Mapping[str, Any], prices: PriceBook | None) -> Mapping[str, Any]:
    if session.get("price_per_hour") is not None or prices is None:
        return session
    price = prices.price(str(session.get("instance_type", "")), str(session.get("lifecycle", "on-demand")))
    return {**session, "price_per_hour": price.per_hour, "gpus": session.get("gpus") or price.gpus}


def gpu_hours_and_cost(
    items: Iterable[Mapping[str, Any]],
    start: dt.datetime,
    end: dt.datetime,
    by: GroupBy = "team",
    prices: PriceBook | None = None,
) -> list[CostRow]:
    """GPU-hours and estimated dollars per team, owner or instance type in [start, end), most expensive first.

    Owners are grouped by ``identity.normalise_owner``, so a person's role sessions, IAM user and tag are one row.

    Sessions are clipped to the period; a session still open counts up to ``end`` (pass the current time as
    ``end`` for a live view). A session recorded without a price is priced from ``prices`` when given.
    """
    if by not in ("team", "owner", "instance_type"):
        raise ValueError(f"cannot group by {by!r}: use team, owner or instance_type")
    groups: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for raw in sessions_of(items):
        session = fill_price(raw, prices)
        usage = session_usage(session, start, end)
        if usage.hours <= 0:
            continue
        key = normalise_owner(session.get("owner")) if by == "owner" else str(session.get(by) or UNKNOWN)
        group = groups[key]
        group["sessions"] += 1
        group["hours"] += usage.hours
        group["gpu_hours"] += usage.gpu_hours
        if usage.cost_usd is None:
            group["unpriced"] += 1
        else:
            group["cost"] += usage.cost_usd
    rows = [
        CostRow(
            key=key,
            sessions=int(g["sessions"]),
            instance_hours=round(g["hours"], 4),
            gpu_hours=round(g["gpu_hours"], 4),
            cost_usd=round(g["cost"], 2),
            unpriced_sessions=int(g["unpriced"]),
        )
        for key, g in groups.items()
    ]
    return sorted(rows, key=lambda row: (-row.cost_usd, -row.gpu_hours, row.key))


@dataclass(frozen=True)
class IdleRow:
    """Idle and reclaimed time for one instance in the period."""

    instance_id: str
    instance_type: str | None
    gpus: int
    idle_hours: float
    idle_gpu_hours: float
    reclaimed_hours: float
    reclaimed_gpu_hours: float
    would_reclaim_hours: float = 0.0
    would_reclaim_gpu_hours: float = 0.0


@dataclass(frozen=True)
class IdleSummary:
    """Idle GPU-hours detected by the idle policy, given back by its enforced stops/terminations, and the hours a
    report-only policy's stops/terminations would have given back (docs/idle.md, "Idle figures")."""

    detected_hours: float
    detected_gpu_hours: float
    reclaimed_hours: float
    reclaimed_gpu_hours: float
    instances: list[IdleRow] = field(default_factory=list)
    would_reclaim_hours: float = 0.0
    would_reclaim_gpu_hours: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _merge(intervals: list[tuple[dt.datetime, dt.datetime]]) -> list[tuple[dt.datetime, dt.datetime]]:
    merged: list[tuple[dt.datetime, dt.datetime]] = []
    for begin, finish in sorted(intervals):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], finish))
        else:
            merged.append((begin, finish))
    return merged


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


def _sessions_by_instance(items: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Sessions grouped by instance once, so per-instance lookups stay linear in the ledger's size."""
    grouped: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for session in sessions_of(items):
        grouped[str(session.get("instance_id"))].append(session)
    return grouped


def _instance_facts(decisions: list[Mapping[str, Any]], sessions: list[Mapping[str, Any]]) -> tuple[str | None, int]:
    """Type and GPU count of one instance: from the idle evidence, else its latest session."""
    for decision in decisions:
        evidence = decision.get("evidence") or {}
        if evidence.get("instance_type"):
            return str(evidence["instance_type"]), int(evidence.get("gpus") or _session_gpus(sessions) or 1)
    latest = max(sessions, key=lambda s: str(s.get("start", "")), default=None)
    if latest is None:
        return None, 1
    return str(latest.get("instance_type") or "") or None, int(latest.get("gpus") or 1)


def _session_gpus(sessions: list[Mapping[str, Any]]) -> int | None:
    return next((int(s["gpus"]) for s in sessions if s.get("gpus")), None)


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
    rows: list[IdleRow] = []
    for instance_id, decisions in sorted(by_instance.items()):
        own_sessions = sessions.get(instance_id, [])
        instance_type, gpus = _instance_facts(decisions, own_sessions)
        idle = 0.0
        for begin, finish in _merge([w for w in map(_idle_interval, decisions) if w]):
            clipped = _clip(begin, finish, start, end)
            idle += _hours(*clipped) if clipped else 0.0
        reclaimed = 0.0
        starts = sorted(t for t in (parse_time(s.get("start")) for s in own_sessions) if t)
        reclaim_windows = []
        for decision in decisions:
            stopped_at = _reclaim_time(decision)
            if stopped_at is None:
                continue
            restart = next((t for t in starts if t > stopped_at), None)
            reclaim_windows.append((stopped_at, restart or end))
        for begin, finish in _merge(reclaim_windows):
            clipped = _clip(begin, finish, start, end)
            reclaimed += _hours(*clipped) if clipped else 0.0
        would = 0.0
        would_windows = []
        for decision in decisions:
            decided_at = _would_reclaim_time(decision)
            if decided_at is None:
                continue
            stops = [t for t in busy.get(instance_id, []) if t > decided_at]
            stops += [t for t in (parse_time(s.get("end")) for s in own_sessions) if t and t > decided_at]
            would_windows.append((decided_at, min(stops, default=end)))
        for begin, finish in _merge(would_windows):
            clipped = _clip(begin, finish, start, end)
            would += _hours(*clipped) if clipped else 0.0
        rows.append(
            IdleRow(
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
        )
    return IdleSummary(
        detected_hours=round(sum(r.idle_hours for r in rows), 4),
        detected_gpu_hours=round(sum(r.idle_gpu_hours for r in rows), 4),
        reclaimed_hours=round(sum(r.reclaimed_hours for r in rows), 4),
        reclaimed_gpu_hours=round(sum(r.reclaimed_gpu_hours for r in rows), 4),
        instances=rows,
        would_reclaim_hours=round(sum(r.would_reclaim_hours for r in rows), 4),
        would_reclaim_gpu_hours=round(sum(r.would_reclaim_gpu_hours for r in rows), 4),
    )


def instance_price(
    instance_id: str, instance_type: str | None, sessions: list[Mapping[str, Any]], prices: PriceBook | None
) -> float | None:
    """USD per instance-hour as billed: the instance's latest recorded price, else the price book's."""
    own = [s for s in sessions if s.get("price_per_hour") is not None]
    latest = max(own, key=lambda s: str(s.get("start", "")), default=None)
    if latest is not None:
        return float(latest["price_per_hour"])
    if prices is not None and instance_type:
        lifecycle = str(sessions[-1].get("lifecycle", "on-demand")) if sessions else "on-demand"
        return prices.price(instance_type, lifecycle).per_hour
    return None


@dataclass(frozen=True)
class OffenderRow:
    """One instance's idle time in money: who owns it and what the idle hours cost (or would save)."""

    instance_id: str
    instance_type: str
    owner: str
    team: str
    idle_gpu_hours: float
    idle_usd: float
    reclaimed_usd: float
    would_reclaim_usd: float
    priced: bool
    price_source: str = ""


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


@dataclass(frozen=True)
class SavingsRow:
    instance_id: str
    instance_type: str | None
    reclaimed_hours: float
    on_demand_per_hour: float | None
    saved_usd: float
    would_reclaim_hours: float = 0.0
    would_save_usd: float = 0.0
    #: Where ``on_demand_per_hour`` came from: an effective rate, the session's recorded price, Price List, table.
    price_source: str = ""


@dataclass(frozen=True)
class Savings:
    """Dollars the enforced idle actions saved: reclaimed instance-hours times the on-demand price."""

    reclaimed_hours: float
    saved_usd: float
    unpriced_instances: int
    instances: list[SavingsRow] = field(default_factory=list)
    would_reclaim_hours: float = 0.0
    would_save_usd: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def savings_rate(
    instance_type: str | None,
    sessions: list[Mapping[str, Any]],
    prices: PriceBook | None,
    instance_id: str | None = None,
) -> tuple[float | None, str]:
    """The hourly rate a reclaimed hour saves, and its source: the account's effective rate when the price book has
    one (what is actually paid), else the on-demand price recorded with the session, else the book's chain."""
    if prices is not None and instance_type and prices.has_effective:
        paid, source = prices.paid(instance_type, instance_id)
        if paid is not None and source.startswith(EFFECTIVE_SOURCES):
            return paid, source
    recorded = _on_demand_price(instance_type, sessions, None)
    if recorded is not None:
        return recorded, "on-demand price recorded with the usage session"
    if prices is not None and instance_type:
        return prices.paid(instance_type, instance_id)
    return None, "unpriced"


def _on_demand_price(
    instance_type: str | None, sessions: list[Mapping[str, Any]], prices: PriceBook | None
) -> float | None:
    own = [s for s in sessions if s.get("on_demand_per_hour") is not None]
    latest = max(own, key=lambda s: str(s.get("start", "")), default=None)
    if latest is not None:
        return float(latest["on_demand_per_hour"])
    if prices is not None and instance_type:
        return prices.price(instance_type, "on-demand").on_demand
    return None


@dataclass(frozen=True)
class PaidUnusedRow:
    """Idle hours of capacity paid for whatever happens (a Capacity Block, a capacity reservation): not a saving to
    be had by stopping, but capacity to hand to another team or to stop buying (``governor.domain.capacity``)."""

    instance_id: str
    instance_type: str
    purchase: str
    reservation_id: str
    ends_at: str
    idle_hours: float
    idle_gpu_hours: float
    idle_usd: float
    priced: bool
    owner: str = UNKNOWN
    usd_per_day: float | None = None


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


def unused_reservations(
    items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime, prices: PriceBook | None = None
) -> list[PaidUnusedRow]:
    """Capacity reservations with capacity no instance ran in, from the idle sweep's decisions about them
    (``evidence.status`` ``unused-capacity``): each sweep in the period counts its unused instances for one sweep
    interval. Dollars at the rate the account pays for the type (an On-Demand Capacity Reservation is billed at the
    On-Demand rate, less any Savings Plan or RI that covers it); a Capacity Block's fee is prepaid and not reported by
    EC2, so its hours are counted and its dollars are not."""
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
    rows = []
    for rid, item in latest.items():
        evidence = item.get("evidence") or {}
        purchase = evidence.get("purchase") or {}
        instance_type = str(evidence.get("instance_type") or UNKNOWN)
        per_hour = evidence.get("price_per_hour")
        if purchase.get("kind") != "capacity-block" and prices is not None and instance_type != UNKNOWN:
            per_hour = prices.paid(instance_type)[0]
        gpus = prices.price(instance_type).gpus if prices is not None else 1
        unused = int(evidence.get("unused_instances") or 0)
        rows.append(
            PaidUnusedRow(
                instance_id=f"(none: {unused} of {evidence.get('total_instances', '?')} unused)",
                instance_type=instance_type,
                purchase=str(purchase.get("kind") or "capacity-reservation"),
                reservation_id=rid,
                ends_at=str(purchase.get("ends_at") or UNKNOWN),
                idle_hours=round(hours[rid], 2),
                idle_gpu_hours=round(hours[rid] * gpus, 2),
                idle_usd=round(hours[rid] * float(per_hour), 2) if per_hour is not None else 0.0,
                priced=per_hour is not None,
                owner=str(evidence.get("owner") or UNKNOWN),
                usd_per_day=round(float(per_hour) * 24 * unused, 2) if per_hour is not None else None,
            )
        )
    return sorted(rows, key=lambda r: (-r.idle_gpu_hours, r.reservation_id))
