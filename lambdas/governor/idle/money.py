"""Money nobody else finds, told once a day: On-Demand instances paying twice beside a reservation of their match
(:mod:`governor.idle.paying_twice`) and stopped GPU instances still billing their volumes and public IPv4 addresses
(:mod:`governor.idle.stopped`). Each is a decision every sweep (recorded in the ledger: the report sums it) and a
finding a day per resource (its id carries the date, so the notifier sends it once). Paying twice is report-only; a
stopped instance past ``idle.stopped.snapshot_and_terminate_after_days`` has its volumes snapshotted, then is
terminated, through the runner (re-read first) and only with ``idle.enforce``.
"""

from __future__ import annotations

import datetime as dt

from governor import runner
from governor.domain.actions import Action, Outcome
from governor.domain.capacity import Reservation
from governor.domain.costs import PriceBook
from governor.domain.decision import Decision, Finding
from governor.domain.fleet import Instance, ownership
from governor.events.envelopes import GovernorEvent
from governor.idle.paying_twice import paid_twice, paying_twice_decision
from governor.idle.ports import Adapters
from governor.idle.stopped import STOPPED_BILLING, Snapshots, stopped_decision
from governor.idle.teardown_actions import SnapshotVolumes
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


#: Ledger kind of the snapshots taken of a stopped instance before its terminate (keyed by instance id).
SNAPSHOTS_KIND = "stopped-snapshots"


def _snapshots(runtime: Runtime, aws: Adapters, instance_id: str) -> Snapshots | None:
    """The snapshots the ledger says were taken of the instance, with their state now (None: none taken)."""
    item = runtime.ledger.get_item(SNAPSHOTS_KIND, instance_id) or {}
    taken = {str(k): str(v) for k, v in (item.get("snapshots") or {}).items()}
    if not taken or aws.storage is None:
        return None
    return Snapshots(taken, aws.storage.snapshot_states(sorted(taken.values())))


def _reread(decision: Decision, aws: Adapters, runtime: Runtime) -> runner.Gate:
    """Right before a snapshot or terminate: still stopped, not exempt or snoozed, the same volumes attached."""
    fleet = runtime.policy.fleet
    live = aws.instances.instance(decision.resource)
    why = None
    if live is None or live.state != "stopped":
        why = f"no longer stopped ({live.state if live else 'gone'})"
    elif fleet.exempt_tag in live.tags or fleet.keep_until_tag in live.tags:
        why = f"tagged {fleet.exempt_tag} or {fleet.keep_until_tag} since the sweep read it"
    elif aws.storage is not None:
        attached = {v.id for v in aws.storage.volumes([decision.resource]).get(decision.resource, [])}
        decided = {str(v["volume_id"]) for v in decision.evidence.get("volumes") or []}
        if attached != decided:
            why = f"its volumes changed since the sweep read them ({sorted(attached)} now)"
    if why is None:
        return runner.Go(live)
    reasons = [*decision.reasons, f"nothing done: {why}"]
    held = decision.model_copy(update={"verdict": "ok", "reasons": reasons, "actions": decision.actions[:1]})
    return runner.Hold(why, held)


def _settle(decision: Decision, event: GovernorEvent, runtime: Runtime, aws: Adapters, now: dt.datetime) -> Decision:
    """A due instance's snapshot or terminate through the runner (recorded, re-read, carried out, recorded again);
    the snapshot ids kept in the ledger for the later terminate and the restore."""

    def keep(action: Action, outcome: Outcome) -> None:
        if isinstance(action, SnapshotVolumes) and outcome.ok:
            taken = dict(outcome.data.get("snapshots") or {})
            item = {"instance_id": decision.resource, "snapshots": taken, "at": now.isoformat()}
            runtime.ledger.put_item(SNAPSHOTS_KIND, decision.resource, item)

    run = runner.Run(event.id, runtime.ledger, runtime.policy, aws, at=now)
    settled = run.settle(decision, reread=lambda d: _reread(d, aws, runtime), after=keep)
    if settled.held is not None and settled.held.record is not None:
        return settled.held.record
    done = settled.done
    return decision.model_copy(update={"evidence": {**decision.evidence, "done": done}}) if done else decision


def stopped_billing(event: GovernorEvent, runtime: Runtime, aws: Adapters, now: dt.datetime) -> list[Finding]:
    """Every stopped GPU instance with what its volumes and public IPv4 addresses cost a month (three paginated
    reads for all of them), and, once due, its next snapshot-and-terminate step (enforced with ``idle.enforce``). A
    failed read is logged and the sweep goes on: this report never holds the sweep up."""
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
    tears_down = policy.idle.stopped.snapshot_and_terminate_after_days is not None
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
            _snapshots(runtime, aws, instance.id) if tears_down else None,
        )
        scope = STOPPED_BILLING
        acting = [a.type for a in decision.enforced_actions() if not a.BY_RUNTIME]
        if acting:
            decision = _settle(decision, event, runtime, aws, now)
            done = "; ".join(decision.evidence.get("done") or [])
            scope, title = f"{scope}#{'+'.join(acting)}", f"{title}; done: {done}" if done else title
        found.append(_told(decision, title, scope, event, runtime, now))
    metrics.add_metric(name="StoppedGpuInstancesBilling", unit="Count", value=len(found))
    return found
