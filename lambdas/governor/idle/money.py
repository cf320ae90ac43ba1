"""Money nobody else finds, told once a day: On-Demand instances paying twice beside a reservation of their match
(:mod:`governor.idle.paying_twice`) and stopped GPU instances still billing their volumes and public IPv4 addresses
(:mod:`governor.idle.stopped`). Each is a decision every sweep (recorded in the ledger: the report sums it) and a
finding a day per resource (its id carries the date, so the notifier sends it once). Report-only: nothing is
stopped, moved, released, lent, snapshotted or terminated here.
"""

from __future__ import annotations

import datetime as dt

from governor.domain.capacity import Reservation
from governor.domain.costs import PriceBook
from governor.domain.decision import Decision, Finding
from governor.domain.fleet import Instance, ownership
from governor.events.envelopes import GovernorEvent
from governor.idle.paying_twice import paid_twice, paying_twice_decision
from governor.idle.ports import Adapters
from governor.idle.stopped import STOPPED_BILLING, stopped_decision
from governor.idle.tell import finding_for, owner
from governor.observability import logger, metrics
from governor.outbox import finding_id
from governor.runtime import Runtime


def _told(
    decision: Decision, title: str, scope: str, event: GovernorEvent, runtime: Runtime, now: dt.datetime
) -> Finding:
    """The decision recorded, and its finding under one id a UTC day (however many sweeps stage it)."""
    runtime.ledger.record(decision, event_id=event.id)
    return finding_for(decision, title, None, event, runtime).model_copy(
        update={
            "id": finding_id(f"{scope}#{now.date().isoformat()}", decision.resource, decision.rule or ""),
            "owner": decision.evidence.get("owner"),
            "team": decision.evidence.get("team"),
        }
    )


def paying_twice(
    unused: Decision, title: str, reservation: Reservation, instances: list[Instance], runtime: Runtime
) -> tuple[Decision, str]:
    """The sweep's decision about a reservation with unused capacity, made a paying-twice one when running On-Demand
    instances of its match run beside it (a targeted reservation or a Capacity Block; from the sweep's own reads: its
    running GPU instances and its one read of the active reservations). One decision per reservation and sweep (the
    ledger keeps one per resource and event): it keeps every unused-capacity field the report sums, and adds the
    instances, their owners, the dollars a day wasted and the fix. Its finding goes to the instances' owner."""
    policy = runtime.policy
    found = paid_twice(instances, [reservation], policy.fleet.is_gpu_type)
    if not found:
        return unused, title
    pair = found[0]
    book = PriceBook(policy.pricing)
    owners = {i.id: owner(i, runtime) for i in pair.instances}
    prices = {i.id: book.paid(i.type, i.id) for i in pair.instances}
    held_by = ownership(reservation.tags, policy.fleet)
    twice, said = paying_twice_decision(pair, owners, prices, held_by)
    evidence = {
        **unused.evidence,
        "paying_twice": twice.evidence,
        "usd_per_day_wasted": twice.evidence["usd_per_day"],
        "notify": {"owner": twice.evidence["owner"], "team": twice.evidence["team"]},
    }
    metrics.add_metric(name="ReservationsPaidTwice", unit="Count", value=1)
    return twice.model_copy(update={"evidence": evidence, "reasons": twice.reasons + unused.reasons[:1]}), said


def stopped_billing(event: GovernorEvent, runtime: Runtime, aws: Adapters, now: dt.datetime) -> list[Finding]:
    """Every stopped GPU instance with what its volumes and public IPv4 addresses cost a month (three paginated
    reads for all of them). A failed read is logged and the sweep goes on: this report never holds the sweep up."""
    policy = runtime.policy
    if policy.idle.stopped.costs == "off" or aws.storage is None:
        return []
    try:
        stopped = aws.instances.gpu_instances(policy.fleet, states=("stopped",))
        ids = [i.id for i in stopped]
        volumes = aws.storage.volumes(ids) if ids else {}
        addresses = aws.storage.public_ips(ids) if ids else {}
    except Exception as error:  # denied, throttled: the idle sweep itself must not fail on this report
        logger.warning("stopped GPU instances not read", extra={"reason": f"{type(error).__name__}: {error}"})
        return []
    found = []
    for instance in stopped:
        decision, title = stopped_decision(
            instance,
            volumes.get(instance.id, []),
            addresses.get(instance.id, []),
            owner(instance, runtime),
            policy.idle.stopped,
            now,
            policy.idle.enforce,
        )
        found.append(_told(decision, title, STOPPED_BILLING, event, runtime, now))
    metrics.add_metric(name="StoppedGpuInstancesBilling", unit="Count", value=len(found))
    return found
