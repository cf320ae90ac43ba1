"""The Spot function's side of the capacity events: read the reservation an event names, record a refusal (and tell
people when the event contradicts EC2), record a lifecycle decision and tell its owners.

The decisions are ``governor.spot.capacity``'s (pure); the handler calls them and hands the result here. A finding for
a contradicting event goes to nobody in particular (the notifier's default route): it means someone invoked the
function with an event AWS did not send, or about something else than it says.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Protocol

from governor import runner
from governor.domain.actions import Notify
from governor.domain.capacity import Reservation, ReservationReader
from governor.domain.decision import Decision, Finding
from governor.domain.times import utc
from governor.events.envelopes import EventBridgeEnvelope
from governor.outbox import Outbox
from governor.runtime import Runtime
from governor.spot.capacity import BLOCK_KIND, Refusal, refused

#: The rule of the finding that says an event was refused because it contradicts EC2.
MISMATCH_RULE = "capacity-event-mismatch"


class Ports(Protocol):
    """What reading a reservation needs of the handler's adapters (``spot.handler.Adapters``)."""

    @property
    def reservations(self) -> ReservationReader | None: ...


def reservation(ports: Ports, reservation_id: str | None) -> Reservation | None:
    """EC2's record of one reservation; None when EC2 has none (or the adapters cannot read any: then every capacity
    event is refused, never trusted). A failed read raises, so Lambda retries the event."""
    if ports.reservations is None or not reservation_id:
        return None
    return ports.reservations.reservations([reservation_id]).get(reservation_id)


def _outbox(runtime: Runtime, event_id: str) -> Outbox:
    box = Outbox(runtime.ledger, runtime.sink, event_id=event_id)
    box.resume()
    return box


def _finding(decision: Decision, event: EventBridgeEnvelope, title: str, detail: str, **extra: Any) -> Finding:
    found = Finding.from_decision(decision, title, account=event.account, region=event.region, event_id=event.id)
    return found.model_copy(update={"detail": detail, **extra})


def refuse(
    event: EventBridgeEnvelope, runtime: Runtime, resource: str, refusal: Refusal, rule: str, event_id: str = ""
) -> dict[str, Any]:
    """Record the refusal with its reason; when the event contradicts EC2, a warning finding says so. Nothing else."""
    event_id = event_id or event.id
    decision = refused(resource, refusal, rule, event.detail_type)
    runtime.ledger.record(decision, event_id=event_id, at=utc(event.time))
    box = _outbox(runtime, event_id)
    if refusal.mismatch:
        title = f"Capacity event refused: {event.detail_type} about {resource} disagrees with EC2"
        detail = f"{decision.reasons[0]}. An event AWS sent would agree: check who can invoke the function."
        box.add([_finding(decision.model_copy(update={"rule": MISMATCH_RULE}), event, title, detail)])
    box.flush()
    return {
        "status": "refused",
        "event_id": event.id,
        "resource": resource,
        "verdict": decision.verdict,
        "reason": decision.reasons[0],
        "mismatch": refusal.mismatch,
    }


def tell(
    event: EventBridgeEnvelope,
    runtime: Runtime,
    ports: Any,
    decision: Decision,
    title: str,
    items: Iterable[tuple[str, str, dict[str, Any]]] = (),
) -> dict[str, Any]:
    """Record ``decision`` and ``items`` (kind, key, item), and tell each owner its ``Notify`` names: one finding
    each, listing that owner's instances when the decision groups them (``evidence.owners``)."""
    at = utc(event.time)
    box = _outbox(runtime, event.id)
    run = runner.Run(event.id, runtime.ledger, runtime.policy, ports, box, at=at)
    run.settle(decision, findings=lambda decided, _: _notices(decided, event, title))
    written = list(items)
    if written:
        runtime.ledger.put_many(written)
    box.flush()
    return {
        "status": "recorded",
        "event_id": event.id,
        "resource": decision.resource,
        "verdict": decision.verdict,
        "reason": decision.reasons[0],
        "told": [f"{a.owner}/{a.team}" for a in decision.actions if isinstance(a, Notify)],
    }


def _notices(decision: Decision, event: EventBridgeEnvelope, title: str) -> list[Finding]:
    mine = {(o["owner"], o["team"]): o["instances"] for o in decision.evidence.get("owners", [])}
    found = []
    for action in decision.actions:
        if not isinstance(action, Notify):
            continue
        instances = mine.get((action.owner, action.team)) or []
        parts = [*decision.reasons, *([f"your instance(s) in it: {', '.join(instances)}"] if instances else [])]
        found.append(_finding(decision, event, title, "; ".join(parts), owner=action.owner, team=action.team))
    return found


def block_items(decision: Decision, event_id: str, at: dt.datetime) -> list[tuple[str, str, dict[str, Any]]]:
    """The block's end recorded on each instance in it (ledger kind ``capacity-block``, key the instance id)."""
    evidence = decision.evidence
    item = {
        "reservation_id": decision.resource,
        "end_date": evidence.get("end_date"),
        "terminates_at": evidence.get("terminates_at"),
        "instance_type": evidence.get("instance_type"),
        "event_id": event_id,
        "recorded_at": at.isoformat(),
    }
    return [(BLOCK_KIND, instance_id, {**item, "instance_id": instance_id}) for instance_id in evidence["instances"]]
