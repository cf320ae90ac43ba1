"""Prices, GPU-hours and dollars: per usage session, and over ledger items for the reports.

Everything here is pure and works on plain ledger items (dicts, as ``DynamoLedger`` stores them and as
``governor ledger export`` writes them), so the report Lambda and ``governor report --ledger FILE`` share it.

Record shape read here (see docs/lifecycle.md): the usage session (``kind="session"``, written by the lifecycle
function): ``instance_id``, ``instance_type``, ``gpus``, ``lifecycle`` (on-demand|spot), ``zone``, ``team``,
``owner``, ``start``, ``end`` (ISO 8601; ``end`` null while open), ``price_per_hour`` (USD per instance-hour, null
when unpriced), ``on_demand_per_hour``. Idle GPU time is read from the decisions of the capability that records it
(``governor.idle.costs``) into the figure types defined here (:class:`IdleSummary`, :class:`OffenderRow`, ...).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from governor.core_policy import PricingPolicy
from governor.domain import gpus as gpu_facts
from governor.domain.facts import price_of
from governor.domain.identity import normalise_owner
from governor.domain.times import parse_time
from governor.domain.unavailable import unavailable

GroupBy = Literal["team", "owner", "instance_type"]
UNKNOWN = "unknown"
RECLAIM_ACTIONS = frozenset({"stop", "terminate"})


class OnDemandPrices(Protocol):
    """A live price source (the AWS Price List API adapter): USD per hour and GPU count, or None if unknown."""

    def on_demand(self, instance_type: str, region: str) -> tuple[float, int | None] | None: ...


@dataclass(frozen=True)
class EffectiveRate:
    """What an instance-hour of a type actually cost the account (Savings Plans, RIs, blocks amortised), and where
    the figure came from (``source``, shown beside every figure priced with it)."""

    per_hour: float
    source: str


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
    #: Whole-GPU equivalents: 0.125 for a ``g6f.large`` (its GPU-hours are an eighth of its hours).
    gpus: float
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
        #: Why the effective-rate source gave nothing, in words (a failed read is a note, never a guess).
        self.effective_error: str | None = None
        self.coverage_error: str | None = None
        #: Every effective rate looked up (type, or ``type#instance``), found or not: what a run priced with, saved
        #: beside its report (``inputs.json``) so the same report can be made again.
        self.looked_up: dict[str, EffectiveRate | None] = {}
        #: The coverage read, when it was (saved with the run's inputs like ``looked_up``).
        self.coverage_read: Coverage | None = None

    @property
    def has_effective(self) -> bool:
        return self._effective is not None

    @property
    def listed_prices(self) -> dict[str, tuple[float, int | None] | None]:
        """Every Price List API price looked up (type -> USD per hour and GPUs, None: not listed)."""
        return dict(self._cache)

    @property
    def effective_label(self) -> str:
        """What the effective-rate source is called in a sentence (``Cost Explorer``, ``the CUR 2.0 table``)."""
        return str(getattr(self._effective, "LABEL", "the effective-rate source"))

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
            self.coverage_error = unavailable(error)
            return None
        self.coverage_read = found
        return found

    def effective_rate(self, instance_type: str, instance_id: str | None = None) -> tuple[float, str] | None:
        """What the account pays an hour, from the effective-rate source (the instance's own CUR 2.0 rate, else Cost
        Explorer's amortised cost for the type), with its source; None without one, or when it has no rate. A failed
        read is said once (``effective_error``) and every later lookup answers None."""
        if self._effective is None or self.effective_error is not None:
            return None
        try:
            found = self._effective.rate(instance_type, instance_id)
        except Exception as error:  # Cost Explorer off, throttled or denied: fall back, and say so
            self.effective_error = unavailable(error)
            return None
        self.looked_up[instance_type if instance_id is None else f"{instance_type}#{instance_id}"] = found
        return (found.per_hour, found.source) if found is not None else None

    def listed(self, instance_type: str, lifecycle: str = "on-demand") -> tuple[float | None, str]:
        """USD per instance-hour for ``lifecycle`` from the Price List API or the policy's table, and its source."""
        price = self.price(instance_type, lifecycle)
        return price.per_hour, price.basis + (f" (as of {price.as_of})" if price.as_of else "")

    def paid(self, instance_type: str, instance_id: str | None = None) -> tuple[float | None, str]:
        """USD per instance-hour at the price the account pays, and its source, in order of truth: the effective
        rate (the instance's own from the CUR 2.0 table, else Cost Explorer's amortised cost for the type) when
        configured and known, else the on-demand chain (Price List API, then the policy's table)."""
        found = self.effective_rate(instance_type, instance_id)
        if found is not None:
            return found
        return self.listed(instance_type, "on-demand")

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
        gpus = _gpus(instance_type, entry, listed[1] if listed else None)
        if listed is not None:
            on_demand: float | None = listed[0]
            source = "price list"
            as_of = None
        elif entry is not None:
            on_demand, source = entry.on_demand, "table"
        else:
            facts = gpu_facts.facts_of(instance_type)
            assumed = facts.label() if facts is not None else "1 GPU assumed"
            return HourlyPrice(instance_type, None, None, gpus, f"unpriced (not in the price table; {assumed})")
        if lifecycle == "spot":
            if entry is not None and entry.spot is not None:
                table_date = self._policy.prices_as_of.isoformat()
                return HourlyPrice(instance_type, entry.spot, on_demand, gpus, "table spot", table_date)
            return HourlyPrice(instance_type, on_demand, on_demand, gpus, f"{source} on-demand (no spot price)", as_of)
        return HourlyPrice(instance_type, on_demand, on_demand, gpus, f"{source} on-demand", as_of)


def _gpus(instance_type: str, entry: Any, listed: int | None) -> float:
    """How many GPUs an instance-hour of the type is worth: the price table's ``gpus`` when the policy sets it, else
    the type's GPU facts (DescribeInstanceTypes, else the shipped table: 0.125 for a ``g6f.large``), else the Price
    List's ``gpu`` attribute, else 1."""
    if entry is not None and "gpus" in entry.model_fields_set:
        return float(entry.gpus)
    facts = gpu_facts.facts_of(instance_type)
    if facts is not None and facts.count > 0:
        return facts.count
    return float(listed or (entry.gpus if entry is not None else 1))


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
    gpus = float(session.get("gpus") or 1)
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
    """The session priced at its instance's one rate (``facts.price_of``: an effective rate for the instance or, when
    On-Demand, its type first, else its own recorded price, else the book's)."""
    if prices is None:
        return session
    price = price_of(
        str(session.get("instance_id") or "") or None,
        str(session.get("instance_type") or "") or None,
        [session],
        prices,
    )
    gpus = session.get("gpus") or prices.price(str(session.get("instance_type", ""))).gpus
    return {**session, "price_per_hour": price.usd_per_hour, "gpus": gpus}


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
    gpus: float
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


def _sessions_by_instance(items: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Sessions grouped by instance once, so per-instance lookups stay linear in the ledger's size."""
    grouped: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for session in sessions_of(items):
        grouped[str(session.get("instance_id"))].append(session)
    return grouped


def instance_price(
    instance_id: str, instance_type: str | None, sessions: list[Mapping[str, Any]], prices: PriceBook | None
) -> float | None:
    """USD per instance-hour: the instance's one rate (``facts.price_of``), which its spend, idle spend, would-reclaim
    and at-stake figures all use."""
    return price_of(instance_id, instance_type, sessions, prices).usd_per_hour


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


def savings_rate(
    instance_type: str | None,
    sessions: list[Mapping[str, Any]],
    prices: PriceBook | None,
    instance_id: str | None = None,
) -> tuple[float | None, str]:
    """The hourly rate a reclaimed hour saves, and its source: the instance's one rate (``facts.price_of``), the same
    its idle hours are priced at (issue 48: never a second basis beside the first)."""
    price = price_of(instance_id, instance_type, sessions, prices)
    return price.usd_per_hour, price.source


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


@dataclass(frozen=True)
class IdleEnergy:
    """The energy and emissions of a period's idle GPU time (docs/reports.md, "GPU energy")."""

    kwh: float
    co2e_kg: float
    #: Idle GPU-hours on models with no known draw (not in kWh).
    unknown_gpu_hours: float
    #: Instance id -> (kWh, kg CO2e), so a team's digest adds up its own instances.
    by_instance: dict[str, tuple[float, float]]
    #: One row per GPU model, costliest first: ``gpu_model``, ``idle_gpu_hours``, ``idle_watts``, ``busy_watts``,
    #: ``idle_kwh``, ``draw_source``.
    by_model: list[dict[str, Any]]
    #: Every idle GPU-hour, counted or not, and the models left out with why: the share covered is stated.
    gpu_hours: float = 0.0
    left_out: dict[str, str] = field(default_factory=dict)
    #: Instance id -> its idle GPU-hours, and -> the model of those left out (a team's share of the coverage).
    hours_by_instance: dict[str, float] = field(default_factory=dict)
    left_out_by_instance: dict[str, str] = field(default_factory=dict)
    #: The PUE and grid factors used, named with their sources.
    basis: str = ""


@dataclass(frozen=True)
class FleetSignals:
    """What the decisions under a policy need the fleet to publish (declared by the capability that reads them)."""

    #: The agent's ``nvidia_gpu`` fields read.
    agent_fields: tuple[str, ...]
    #: The oldest a sample may be when a sweep reads it.
    max_sample_age_minutes: float
    #: EC2's one-minute CPU or network metrics are read (detailed monitoring on every GPU instance).
    host_metrics: bool


@dataclass(frozen=True)
class IdleTime:
    """GPU time judged idle, read from the decisions of the capability that records it (its registry entry's
    ``idle_time``, ``governor.capability.Registry.idle_time``): the report's idle figures, the fleet chart's idle band
    and heat map, and rightsizing's utilisation samples. Every reader takes plain ledger items, like this module."""

    #: The ``policy`` its decisions carry: the fleet chart's samples and utilisation come from these decisions.
    policies: frozenset[str]
    #: Idle GPU-hours detected, reclaimed and (report-only) would-reclaim in [start, end), per instance.
    hours: Callable[[Iterable[Mapping[str, Any]], dt.datetime, dt.datetime], IdleSummary]
    #: Dollars the reclaimed (and would-reclaim) hours saved (would save).
    savings: Callable[[Iterable[Mapping[str, Any]], dt.datetime, dt.datetime, PriceBook | None], Savings]
    #: Every instance with idle time in money, costliest first.
    offenders: Callable[[Iterable[Mapping[str, Any]], dt.datetime, dt.datetime, PriceBook | None], list[OffenderRow]]
    #: Idle capacity paid for whatever happens (reservations, Capacity Blocks), used or not.
    paid_unused: Callable[
        [Iterable[Mapping[str, Any]], dt.datetime, dt.datetime, PriceBook | None], list[PaidUnusedRow]
    ]
    #: Per instance, the merged windows judged idle.
    windows: Callable[[Iterable[Mapping[str, Any]]], dict[str, list[tuple[dt.datetime, dt.datetime]]]]
    #: The energy of the offenders' idle GPU-hours (with each instance's region, when known).
    energy: Callable[[Sequence[OffenderRow], Mapping[str, Any]], IdleEnergy]
    #: The statuses of its decisions that say no GPU sample was read (the sweep found no usable data).
    unsampled: frozenset[str] = frozenset({"unmonitored"})

    def decided(self, item: Mapping[str, Any]) -> bool:
        """Whether ``item`` is one of its decisions (ledger items without a ``kind`` are decisions)."""
        return item.get("kind", "decision") == "decision" and item.get("policy") in self.policies

    def sampled(self, item: Mapping[str, Any]) -> bool:
        """Whether ``item`` is one of its decisions made on a GPU sample: a decision whose status says there was none
        (``unsampled``: the idle sweep's ``unmonitored``) is the absence of a sample, charted as unmonitored time,
        never busy (issue 48: two instances without metrics were drawn blue for 71 GPU-hours)."""
        return self.decided(item) and (item.get("evidence") or {}).get("status") not in self.unsampled
