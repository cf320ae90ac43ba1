"""What a sweep reads before it decides, read once: the GPU instances (exemptions bounded, report-only keeps, their
reservations and HyperPod nodes), the metrics of the lookback (their source vouched for and attributed), the marks
and their checkpoints' status, and the breaker. The domain then decides once on what this returns.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND, Breaker
from governor.domain.capacity import KnownFirst, Reservation, with_hyperpod, with_reservations
from governor.domain.fleet import KEEP_KIND, Instance
from governor.domain.tagging import bounded_instance
from governor.events.envelopes import GovernorEvent
from governor.idle.domain import (
    CHECKPOINT_DONE,
    MARK_KIND,
    Mark,
    Series,
    fetched_signals,
    lookback_start,
    sweep_interval,
)
from governor.idle.ports import Adapters
from governor.idle.provenance import vouch
from governor.idle.sources import attribution
from governor.idle.window_statistics import WindowMaxima, plainly_busy, statistics_signals, statistics_window
from governor.observability import logger
from governor.runtime import Runtime


def load_marks(runtime: Runtime) -> dict[str, Mark]:
    """Every live mark in one ledger query (never one read per instance); an organisation target reads only the
    marks its own sweeps wrote (``fanout.TargetLedger.query_own``: the ``by-target`` index), never the organisation's.
    A mark only the sweep writes; Stop now's clearing of one is unstamped and leaves the index, which reads as no
    mark, as a cleared one does."""
    marks: dict[str, Mark] = {}
    own = getattr(runtime.ledger, "query_own", None)  # an organisation target's: its own marks only
    for item in own(MARK_KIND) if own is not None else runtime.ledger.query_kind(MARK_KIND):
        mark = Mark.from_item(item)
        instance_id = item.get("instance_id")
        if mark is not None and isinstance(instance_id, str):
            marks[instance_id] = mark
    return marks


def load_breaker(runtime: Runtime) -> Breaker:
    """The circuit breaker's state (closed when never tripped)."""
    return Breaker.from_item(runtime.ledger.get_item(BREAKER_KIND, BREAKER_KEY))


def remembered_keeps(instances: list[Instance], runtime: Runtime) -> list[Instance]:
    """Report-only idle: a Keep clicked while buttons were report-only wrote no tag, so the instance carries the snooze
    it would have had. No later report-only decision or message then says "would be stopped" during a snooze the owner
    asked for. Never when idle enforces: only a real tag (or Keep with buttons on) spares an instance a real stop."""
    if runtime.policy.idle.enforce:
        return instances
    tag = runtime.policy.fleet.keep_until_tag
    if getattr(runtime.ledger, "scope", None):  # an organisation target: its own instances' keeps, by key
        found = list(runtime.ledger.get_many(KEEP_KIND, [i.id for i in instances]).values())
    else:  # one account: the few keeps of the fleet in one query, not a read per instance
        found = runtime.ledger.query_kind(KEEP_KIND)
    keeps = {str(item.get("instance_id")): str(item.get("until")) for item in found}
    return [
        replace(i, tags={**i.tags, tag: keeps[i.id]}) if i.id in keeps and tag not in i.tags else i for i in instances
    ]


def refresh_checkpoints(marks: dict[str, Mark], aws: Adapters) -> None:
    """Ask SSM how pending checkpoint commands ended, so the domain knows whether to act or wait."""
    for instance_id, mark in list(marks.items()):
        if mark.checkpoint_command_id and mark.checkpoint_status not in CHECKPOINT_DONE:
            status = aws.commands.status(mark.checkpoint_command_id, instance_id)
            marks[instance_id] = replace(mark, checkpoint_status=status)


def bounded(instance: Instance, runtime: Runtime, now: dt.datetime) -> Instance:
    """Exemptions as ``governor.domain.tagging.bounded`` reads them: each ends, and each needs a proven author."""
    return bounded_instance(instance, runtime.policy.fleet, runtime.ledger, now, runtime.policy.idle.exemptions)


def active_reservations(runtime: Runtime, aws: Adapters) -> list[Reservation] | None:
    """Every active reservation, read once a sweep when unused ones are reported (the instances' reservations are then
    looked up in it first); None when off or not read."""
    if runtime.policy.idle.unused_reservations == "off" or aws.reservations is None:
        return None
    try:
        return aws.reservations.active()
    except Exception as error:  # moto lacks the call; AWS may throttle: the sweep goes on without this report
        logger.warning("unused capacity reservations not read", extra={"reason": f"{type(error).__name__}: {error}"})
        return None


def read_signals(
    instances: list[Instance], runtime: Runtime, aws: Adapters, now: dt.datetime
) -> dict[str, dict[str, Series]]:
    """The lookback's metrics of ``instances``, from a source vouched for (its nodes are the instances judged)."""
    policy = runtime.policy
    start = lookback_start(policy.idle, now, sweep_interval(policy.idle))
    vouch(aws.metrics, instances, aws.nodes, (c.name for c in policy.idle.clusters if c.reclaim == "drain"))
    return aws.metrics.fetch([i.id for i in instances], fetched_signals(policy.idle), start, now)


def read_two_phases(
    instances: list[Instance], runtime: Runtime, aws: Adapters, now: dt.datetime
) -> tuple[dict[str, dict[str, Series]], dict[str, WindowMaxima]]:
    """The sweep's read: where the source answers window statistics (CloudWatch: ``window_maxima``), first those of
    every instance, then the lookback's minute points only for the instances they do not prove plainly busy
    (:mod:`governor.idle.window_statistics`); every other source, the minute points of all (:func:`read_signals`)."""
    policy = runtime.policy.idle
    statistics: dict[str, WindowMaxima] = {}
    ask = getattr(aws.metrics, "window_maxima", None)
    window = statistics_window(policy, now, sweep_interval(policy))
    if callable(ask) and window is not None and instances:
        maxima = ask({i.id: statistics_signals(i, policy) for i in instances}, window.start, window.end)
        for instance in instances:
            found = WindowMaxima(window, maxima.get(instance.id, {}))
            if plainly_busy(found, instance, policy):
                statistics[instance.id] = found
    rest = [i for i in instances if i.id not in statistics]
    return (read_signals(rest, runtime, aws, now) if rest else {}), statistics


@dataclass
class Gathered:
    """One sweep's reads: the instances, the active reservations (None: not read), the signals, and the marks as
    stored and as decided on (checkpoint statuses refreshed); ``statistics``: the instances judged plainly busy from
    window statistics, which have no minute series in ``signals``."""

    instances: list[Instance]
    active: list[Reservation] | None
    signals: dict[str, dict[str, Series]]
    stored: dict[str, Mark]
    marks: dict[str, Mark]
    statistics: dict[str, WindowMaxima] = field(default_factory=dict)


def gather(event: GovernorEvent, runtime: Runtime, aws: Adapters, now: dt.datetime) -> Gathered:
    """Every read the sweep decides on, in one pass (paginated DescribeInstances, batched GetMetricData, one ledger
    query for the marks; CloudWatch's in two phases, :func:`read_two_phases`); the metric source's attribution is
    recorded as it is read."""
    policy = runtime.policy
    interval = sweep_interval(policy.idle)
    instances = remembered_keeps([bounded(i, runtime, now) for i in aws.instances.gpu_instances(policy.fleet)], runtime)
    active = active_reservations(runtime, aws)
    known = KnownFirst({r.id: r for r in active}, aws.reservations) if active is not None and aws.reservations else None
    instances, unread = with_reservations(instances, known or aws.reservations)
    if unread:
        logger.warning("idle sweep without reservation details", extra={"reason": unread})
    instances, unread = with_hyperpod(instances, aws.hyperpod)
    if unread:
        logger.warning("idle sweep without HyperPod node lists", extra={"reason": unread})
    unread = aws.gpu_types({i.type for i in instances}) if aws.gpu_types is not None else None
    if unread:
        logger.warning("idle sweep with the shipped GPU table", extra={"reason": unread})
    signals, statistics = read_two_phases(instances, runtime, aws, now)
    runtime.ledger.record_many(attribution(aws.metrics, policy.idle, now - interval, now), event_id=event.id)
    stored = load_marks(runtime)
    marks = dict(stored)
    refresh_checkpoints(marks, aws)
    return Gathered(instances, active, signals, stored, marks, statistics)
