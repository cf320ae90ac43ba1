"""``governor explain --instances``: the idle sweep's decision on each instance, were its GPUs idle for the window.

The idle policy is judged on a schedule, not on an event, so its preview takes the fleet instead: instances as
``aws ec2 describe-instances`` prints them, read by the sweep's own mapping (``adapters.ec2.to_instance``: lifecycle,
capacity reservation, tags), their reservations as ``aws ec2 describe-capacity-reservations`` prints them (match
criteria, a block's end), and HyperPod clusters' node lists. The live state the sweep reads (GPU metrics, the idle
mark) is assumed, each assumption stated: every signal idle for the whole window, the owner warned a warning period
ago. The decision is then made by the sweep's own functions (``assess_for_sweep``, ``decide``), so a Capacity Block,
a capacity reservation, a HyperPod node or a scarce type shows the hold, restart risk and reasons the sweep records,
and the row of the decision table (:mod:`governor.idle.table`) that decided.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from governor.domain.capacity import Reservation, with_hyperpod, with_reservations
from governor.domain.decision import Decision
from governor.domain.explain import Assumed
from governor.domain.fleet import Instance, ownership
from governor.idle.assessment import assess_for_sweep
from governor.idle.decide import decide
from governor.idle.domain import Mark, Series, required_signals
from governor.idle.stopped import preview_stopped
from governor.idle.table import Row
from governor.policy import Policy

SAMPLE_SECONDS = 60


class _Reservations:
    def __init__(self, found: Mapping[str, Reservation]) -> None:
        self._found = found

    def reservations(self, ids: list[str]) -> dict[str, Reservation]:
        return {i: self._found[i] for i in ids if i in self._found}

    def active(self) -> list[Reservation]:
        return [r for r in self._found.values() if r.state == "active"]


class _Nodes:
    def __init__(self, nodes: Mapping[str, str]) -> None:
        self._nodes = dict(nodes)

    def nodes(self) -> dict[str, str]:
        return dict(self._nodes)


def idle_signals(policy: Policy, now: dt.datetime) -> dict[str, Series]:
    """Every signal the sweep requires, at zero, one sample a minute over the window (and a sweep's margin)."""
    start = now - dt.timedelta(minutes=policy.idle.window_minutes + 15)
    times = [float(t) for t in range(int(start.timestamp()), int(now.timestamp()), SAMPLE_SECONDS)]
    return {name: Series(times, [0.0] * len(times)) for name in required_signals(policy.idle)}


def preview_instances(
    instances: Sequence[Instance],
    policy: Policy,
    now: dt.datetime,
    *,
    reservations: Mapping[str, Reservation] | None = None,
    hyperpod: Mapping[str, str] | None = None,
) -> list[tuple[Decision, Row | None]]:
    """One idle decision per instance, as the sweep would record it once the window has passed idle, with the row of
    the decision table that decided it."""
    listed, _ = with_reservations(list(instances), _Reservations(reservations or {}))
    listed, _ = with_hyperpod(listed, _Nodes(hyperpod) if hyperpod is not None else None)
    warned = now - dt.timedelta(minutes=policy.idle.warning_minutes)
    idle_since = now - dt.timedelta(minutes=policy.idle.window_minutes)
    found: list[tuple[Decision, Row | None]] = []
    for instance in listed:
        if instance.state == "stopped":  # what it still bills, when it is due for snapshot and terminate, the restore
            who = ownership(instance.tags, policy.fleet)
            found.append((preview_stopped(instance, who, policy.idle.stopped, now, policy.idle.enforce), None))
            continue
        assumed = Assumed(
            Mark(idle_since=idle_since, warned_at=warned),
            (
                f"every GPU signal of {instance.id} idle for the whole window ({policy.idle.window_minutes} min)",
                f"its owner warned {policy.idle.warning_minutes} min ago (the idle mark from {idle_since.isoformat()})",
                *(
                    [f"capacity reservation {instance.capacity_reservation_id} not in --reservations: held as targeted"]
                    if instance.capacity_reservation_id and instance.capacity_reservation_id not in (reservations or {})
                    else []
                ),
            ),
        )
        assessment, may_act = assess_for_sweep(instance, idle_signals(policy, now), policy, now)
        outcome = decide(instance, assessment, assumed.state, policy, now, may_act=may_act)
        found.append((assumed.on(outcome.decision), outcome.row))
    return found


def explain_instances(
    instances: Sequence[Instance],
    policy: Policy,
    now: dt.datetime,
    *,
    reservations: Mapping[str, Reservation] | None = None,
    hyperpod: Mapping[str, str] | None = None,
) -> list[Decision]:
    """One idle decision per instance, as the sweep would record it once the window has passed idle."""
    return [d for d, _ in preview_instances(instances, policy, now, reservations=reservations, hyperpod=hyperpod)]


def explained(
    decisions: Sequence[Decision], now: dt.datetime, rows: Sequence[Row | None] | None = None
) -> dict[str, Any]:
    """The ``explain`` result shape (verdict, what was explained, the decisions), for the CLI's renderers; with
    ``rows``, each decision also names the row of the decision table that decided it (``rule``)."""
    from governor.domain.decision import strongest

    public = [d.public() for d in decisions]
    for shown, row in zip(public, rows or (), strict=False):
        if row is not None:
            shown["rule"] = row.public()
    return {
        "verdict": strongest(d.verdict for d in decisions),
        "event": {"id": f"idle sweep at {now.isoformat()}", "kind": "idle-sweep"},
        "decisions": public,
    }
