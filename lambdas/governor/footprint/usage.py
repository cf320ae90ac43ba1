"""A month of the governor's work in billable units: how often each function runs under a policy, and what each run
uses, from the measured model (``measured.py``).

Every registered trigger is priced from its own measurement, keyed ``<function>.<trigger id>``: a schedule runs as
often as its expression says (once per account and region it sweeps, in organisation mode), a bus rule once per
finding published, an EventBridge rule as often as the fleet's life sends its events (launches, state changes, Spot
interruptions, each measured as the events one instance's life sends). A run's units are its measured fixed part,
plus a part per instance it sweeps, per idle instance, and per idle episode (a warning and its "would stop").
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Hours in a month, as AWS's price examples count them.
MONTH_HOURS = 730.0
DAYS_PER_MONTH = MONTH_HOURS / 24
_RATE = re.compile(r"^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$")
_UNIT_MINUTES = {"minute": 1, "hour": 60, "day": 1440}


def load_model() -> dict[str, Any]:
    """The measured model (``measured.py``, written by ``python -m governor_cli.cost.measure --write``)."""
    from governor.footprint.measured import MODEL

    return MODEL


@dataclass(frozen=True)
class Fleet:
    """What the estimate is for. Besides the size, each figure is an assumption the output states, with its flag."""

    instances: int
    accounts: int = 1
    regions: int = 1
    #: GPUs per instance: only configurations that publish every GPU's own series depend on it.
    gpus_per_instance: float = 4.0
    #: Share of the instances idle at a sweep (report-only keeps them running, and swept).
    idle_share: float = 0.10
    #: Idle episodes (a warning, then the report-only "would stop" or the stop) per instance a month.
    idle_episodes: float = 1.0
    #: Launches per instance a month (each a RunInstances call and its state changes).
    launches: float = 1.0
    #: Spot interruption warnings per instance a month.
    interruptions: float = 0.0
    #: The accounts' other management events a month, per account and region, that the governor's trail records.
    account_events: float = 0.0
    #: The governor's trail is the account's first (management events free) rather than a second copy.
    first_trail: bool = False

    @property
    def targets(self) -> int:
        """Accounts x regions: what a fanned-out sweep runs once for."""
        return max(1, self.accounts) * max(1, self.regions)


def per_month(expression: str, hours: float = MONTH_HOURS) -> float:
    """How many times a schedule expression fires in ``hours``: ``rate(...)`` exactly; ``cron(...)`` from its minute,
    hour and day fields (a list, range, step or ``*``), the day of week taken as days a week."""
    found = _RATE.match(expression.strip())
    if found:
        unit = found.group(2).rstrip("s")
        return hours * 60 / (int(found.group(1)) * _UNIT_MINUTES[unit])
    fields = expression.strip().removeprefix("cron(").removesuffix(")").split()
    if len(fields) < 6:
        return hours / 24
    minute, hour, day, _month, weekday = fields[:5]
    daily = _count(minute, 60) * _count(hour, 24)
    if weekday not in ("?", "*"):
        days = _count(weekday, 7) * hours / 24 / 7
    elif day not in ("?", "*"):
        days = _count(day, 31) * hours / 24 / (365.25 / 12)
    else:
        days = hours / 24
    return daily * days


def _count(field_text: str, span: int) -> float:
    """Values a cron field takes: ``*``, ``a,b``, ``a-b``, ``*/n`` and names (MON) counted as one each."""
    if field_text in ("*", "?"):
        return float(span)
    total = 0.0
    for part in field_text.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            total += span / int(step or 1)
        elif "-" in base and all(b.isdigit() for b in base.split("-")):
            low, high = (int(b) for b in base.split("-"))
            total += (high - low) / int(step or 1) + 1
        else:
            total += 1
    return total


@dataclass
class Work:
    """A month of one function's runs: how many per trigger, and the units they use together."""

    runs: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    units: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def invocations(self) -> float:
        return float(sum(self.runs.values()))


def run_units(
    entry: Mapping[str, Any], fleet: Fleet, runs: float, swept: float, share: float = 1.0
) -> defaultdict[str, float]:
    """One trigger's units over ``runs`` runs, each sweeping ``swept`` instances (its target's share); ``share`` is
    the period's share of a month (the idle episodes it holds)."""
    units: defaultdict[str, float] = defaultdict(float)
    idle = swept * fleet.idle_share
    episodes = fleet.idle_episodes * fleet.instances * share / runs if runs else 0.0
    for part, each in (("fixed", 1.0), ("per_instance", swept), ("per_idle_instance", idle), ("per_episode", episodes)):
        for unit, value in (entry.get(part) or {}).items():
            units[unit] += float(value) * each * runs
    return units


def add(into: defaultdict[str, float], more: Mapping[str, float]) -> None:
    """Sum ``more`` into ``into``, unit by unit."""
    for unit, value in more.items():
        into[unit] += value


def month_of_work(
    policy: Any, fleet: Fleet, hours: float = MONTH_HOURS, observed: Mapping[str, float] | None = None
) -> dict[str, Work]:
    """Every function's month (or ``hours``) under ``policy``: schedules and rules first, then the bus rules, which
    run once per finding the others published. ``observed`` gives a trigger's runs as counted (the report counts the
    sweeps its period recorded) instead of from its schedule."""
    from governor.registry import REGISTRY

    model = load_model()
    entries: Mapping[str, Any] = model["invocations"]
    share = hours / MONTH_HOURS
    work: dict[str, Work] = {name: Work() for name in REGISTRY}
    bus: list[tuple[str, str]] = []
    for capability in REGISTRY.values():
        for trigger in capability.triggers:
            if trigger.when is not None and not trigger.when(policy):
                continue
            key = f"{capability.name}.{trigger.id}"
            if trigger.kind == "bus":
                bus.append((capability.name, key))
                continue
            runs, swept = _runs(trigger, key, capability.fans_out, policy, fleet, model, hours, share)
            if observed is not None and key in observed:
                runs = float(observed[key])
            if runs and key in entries:
                if trigger.kind == "schedule":
                    work[capability.name].units["scheduled_runs"] += runs
                work[capability.name].runs[key] += runs
                add(work[capability.name].units, run_units(entries[key], fleet, runs, swept, share))
    findings = sum(w.units.get("events_put", 0.0) for w in work.values())
    for name, key in bus:
        if key in entries and findings:
            work[name].runs[key] += findings
            add(work[name].units, run_units(entries[key], fleet, findings, 0.0))
    return work


def _runs(
    trigger: Any,
    key: str,
    fans_out: bool,
    policy: Any,
    fleet: Fleet,
    model: Mapping[str, Any],
    hours: float,
    share: float,
) -> tuple[float, float]:
    """How many runs of ``trigger`` in the period, and how many instances each sweeps."""
    if trigger.kind == "schedule":
        targets = fleet.targets if fans_out else max(1, fleet.regions)
        return per_month(trigger.expression(policy), hours) * targets, fleet.instances / targets
    if trigger.kind == "rule":
        lives = fleet.instances * fleet.launches * share
        interrupted = fleet.instances * fleet.interruptions * share
        per_launch = float(model.get("per_launch", {}).get(key, 0.0))
        per_interruption = float(model.get("per_interruption", {}).get(key, 0.0))
        return lives * per_launch + interrupted * per_interruption, 0.0
    return 0.0, 0.0
