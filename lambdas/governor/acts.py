"""What the ledger keeps of an act: its intent before the call, its outcome after, and the repair of an act whose
outcome was never written. The runner (``governor.runner``) writes them for every capability that acts.

An act's outcome is written after the call that makes it (StopInstances, RevokeSecurityGroupIngress, EnableKeyRotation,
SendCommand...). Whatever fails between the two (a throttled PutItem past botocore's retries, a timeout, a killed
process) used to leave the act out of the ledger: the decision said "failed: ... PutItem" though the instance was
stopped, and once the retried sweep no longer listed the stopped instance its decision kept no outcome at all. So:

1. **Intent first.** Right before the call, the runner writes an ``action-intent`` item under the outcome's key
   (``resource#event id#type``): the policy, resource, event, action and the decision, and when. A failed intent write
   stops the act (nothing happened; Lambda retries).
2. **Outcome after.** The outcome item (kind ``action``), then the decision with ``evidence.done``, then the intent
   marked completed (``completed_at``). An exception after an act carries what was done (``governor_done``), so the
   caller's failure record says "stopped; failed: ..." rather than "failed".
3. **Repair.** :func:`repair` finds intents never completed (older than :data:`STALE_AFTER`, or of the event being
   handled: a retry's own): each act's outcome is the recorded one if any, else what the cloud's state says
   (``confirm``: the capability re-reads the resource, e.g. the instance is stopped), else, past
   :data:`UNKNOWN_AFTER`, "outcome not recorded". It writes the outcome, the decision with ``evidence.done`` and
   ``evidence.repaired``, and completes the intent. The idle sweep, the one schedule every deployment runs, repairs
   every capability's intents of its account and region (as it publishes every function's stale findings).

Acts whose records a sweep batches (``runner.Later``: its tags) write no intent: a lost record costs a repeat only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from governor.domain.actions import Outcome
from governor.domain.decision import Action, Decision
from governor.domain.ports import Ledger, event_origin, handling_event_from, target_key
from governor.observability import logger, metrics

#: Ledger kind of an action's outcome: one item per executed action, the same shape for every capability.
ACTION_KIND = "action"
#: Ledger kind of an action's intent, written right before the call and completed once its outcome is recorded.
INTENT_KIND = "action-intent"
#: An intent younger than this may belong to an invocation still running: a repair leaves it to that one.
STALE_AFTER = dt.timedelta(minutes=5)
#: An intent whose outcome nobody can read back is recorded as "outcome not recorded" after this (by then Lambda's
#: retries of its event are over).
UNKNOWN_AFTER = dt.timedelta(hours=1)
#: How far back a repair looks.
HORIZON = dt.timedelta(days=7)
#: The attribute of an exception raised after an act, naming what was done before it (read by the caller's record).
DONE_ATTR = "governor_done"

#: What the cloud's state says of an act whose outcome was not recorded: its outcome, or None when it cannot tell.
Confirm = Callable[[Action, Mapping[str, Any]], Outcome | None]


def action_key(decision: Decision, event_id: str, action: Action) -> str:
    return f"{decision.resource}#{event_id}#{action.type}"


def outcome_item(decision: Decision, action: Action, outcome: Outcome, event_id: str) -> dict[str, Any]:
    """The ``action`` item: one shape for every capability."""
    return {
        "policy": decision.policy,
        "resource": decision.resource,
        "action": action.model_dump(),
        "ok": outcome.ok,
        "error_code": outcome.error_code,
        "message": outcome.message,
        "done": outcome.done,
        "event_id": event_id,
        **({"verified": outcome.verified.model_dump()} if outcome.verified is not None else {}),
    }


class Intents:
    """One decision's intents in one invocation: written before each act, completed together at the end."""

    def __init__(self, ledger: Ledger, decision: Decision, event_id: str, at: dt.datetime | None) -> None:
        self.ledger = ledger
        self.decision = decision
        self.event_id = event_id
        self.at = at
        self.written: list[tuple[str, dict[str, Any]]] = []

    def intend(self, action: Action) -> None:
        """Written before the call: if this write fails, the act is not made."""
        now = self.at or dt.datetime.now(dt.UTC)
        key = action_key(self.decision, self.event_id, action)
        item = {
            "policy": self.decision.policy,
            "resource": self.decision.resource,
            "event_id": self.event_id,
            "action": action.model_dump(),
            "decision": self.decision.model_dump(mode="json"),
            "intended_at": now.isoformat(),
            "order": len(self.written),
            **event_origin(),
            **_owner(),
        }
        self.ledger.put_item(INTENT_KIND, key, item)
        self.written.append((key, item))

    def complete(self) -> None:
        """Every outcome and the decision are recorded: the intents are closed (one batched write)."""
        if not self.written:
            return
        now = (self.at or dt.datetime.now(dt.UTC)).isoformat()
        self.ledger.put_many([(INTENT_KIND, key, {**item, "completed_at": now}) for key, item in self.written])
        self.written = []


def _time(value: Any) -> dt.datetime | None:
    try:
        parsed = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _owner() -> dict[str, str]:
    """The organisation target (``account#region``, as ``fanout.TargetLedger`` stamps its items) whose sweep repairs
    an intent: the account and region of the event being acted on, so a target reads its own intents from the
    ledger's ``by-target`` index (an event-driven function's too: Spot, network, keys). None when either is unknown:
    such an intent is anyone's, repaired once a round by the planner (:func:`repair_unowned`)."""
    origin = event_origin()
    if "account" not in origin or "region" not in origin:
        return {}
    return {"target": target_key(origin["account"], origin["region"])}


def _intents(ledger: Ledger, since: dt.datetime) -> list[dict[str, Any]]:
    """The intents a repair reads: an organisation target's own (``query_own``: its partition of the ``by-target``
    index, a few items), not every intent of the organisation; in one account every intent of the horizon."""
    own = getattr(ledger, "query_own", None)
    return list(own(INTENT_KIND, since=since)) if own is not None else ledger.query_kind(INTENT_KIND, since=since)


def _open(
    items: Sequence[Mapping[str, Any]], now: dt.datetime, event_id: str, *, anywhere: bool = False
) -> list[Mapping[str, Any]]:
    """Intents not completed, of the event being handled or old enough that their invocation has ended, of this
    account and region (an intent without an origin is anyone's; ``anywhere``: of any account and region)."""
    origin = {} if anywhere else event_origin()
    found = []
    for item in items:
        at = _time(item.get("intended_at"))
        if item.get("completed_at") or at is None:
            continue
        if any(item.get(k) and origin.get(k) and item.get(k) != origin.get(k) for k in ("account", "region")):
            continue
        if item.get("event_id") == event_id or at <= now - STALE_AFTER:
            found.append(item)
    return found


def _unknown(action: Action) -> Outcome:
    why = "the invocation that acted ended before recording its outcome, and its state cannot be read back"
    return Outcome(ok=False, error_code="OutcomeNotRecorded", message=why, done=f"{action.type}: outcome not recorded")


def repair(ledger: Ledger, *, now: dt.datetime, event_id: str, confirm: Confirm | None = None) -> int:
    """Complete the intents earlier invocations left open (see the module): returns how many decisions it repaired.
    Never raises: a repair that fails is tried again by the next run."""
    return _repair(ledger, lambda: _open(_intents(ledger, now - HORIZON), now, event_id), now, confirm)


def repair_unowned(ledger: Ledger, *, now: dt.datetime, event_id: str) -> int:
    """Organisation mode, once a round (the planner): the open intents no target owns (written before intents named
    their target, or of an event without an account or region), which no target's own read finds. Nothing here can
    read a member's resources back: a recorded outcome completes its decision, else "outcome not recorded" once
    retries are over."""

    def unowned() -> list[Mapping[str, Any]]:
        items = [i for i in ledger.query_kind(INTENT_KIND, since=now - HORIZON) if not i.get("target")]
        return _open(items, now, event_id, anywhere=True)

    return _repair(ledger, unowned, now, None)


def _repair(
    ledger: Ledger, read: Callable[[], list[Mapping[str, Any]]], now: dt.datetime, confirm: Confirm | None
) -> int:
    try:
        items = read()
        groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
        for item in items:
            groups.setdefault((str(item["policy"]), str(item["resource"]), str(item["event_id"])), []).append(item)
        ordered = [sorted(g, key=lambda i: int(i.get("order") or 0)) for g in groups.values()]
        repaired = 0
        for group in ordered:  # the decision is recorded again where it was made (the intent's origin), not here
            with handling_event_from(group[0].get("account"), group[0].get("region")):
                repaired += _repair_one(ledger, group, now, confirm)
    except Exception as error:
        logger.warning("act records not repaired", extra={"reason": f"{type(error).__name__}: {error}"})
        return 0
    if repaired:
        metrics.add_metric(name="ActRecordsRepaired", unit="Count", value=repaired)
    return repaired


def _repair_one(ledger: Ledger, intents: list[Mapping[str, Any]], now: dt.datetime, confirm: Confirm | None) -> int:
    """One decision's open intents: the outcome of each of its acts (recorded, else read back, else unknown), the
    decision with what was done, the intents completed."""
    decision = _decision(intents[0]["decision"])
    event_id = str(intents[0]["event_id"])
    intended = {str(i["action"]["type"]): i for i in intents}
    enforced = [a for a in decision.enforced_actions() if not a.BY_RUNTIME]
    keys = {str(a.type): action_key(decision, event_id, a) for a in enforced}
    recorded = ledger.get_many(ACTION_KIND, list(keys.values()))
    done: list[str] = []
    sources: list[str] = []
    for action in enforced:
        key, intent = keys[str(action.type)], intended.get(str(action.type))
        found = recorded.get(key)
        if found is not None or intent is None:  # recorded, or never attempted (an earlier act failed before it)
            done += [str(found.get("done") or "")] if found is not None else []
            continue
        seen = confirm(action, intent) if confirm is not None else None
        if seen is None:
            if now - (_time(intent.get("intended_at")) or now) < UNKNOWN_AFTER:
                return 0  # its event may still be retried: left for a later run
            seen = _unknown(action)
        ledger.put_item(ACTION_KIND, key, outcome_item(decision, action, seen, event_id))
        done.append(seen.done)
        sources.append("unknown" if seen.error_code == "OutcomeNotRecorded" else "read back from the cloud")
    how = ", ".join(sources) or "recorded; the decision was not"
    why = f"outcome written by a later run ({how}): the acting invocation ended before recording it"
    evidence = {**decision.evidence, "done": [d for d in done if d], "repaired": why}
    ledger.record(
        decision.model_copy(update={"evidence": evidence}), event_id=event_id, at=_time(intents[0].get("intended_at"))
    )
    stamp = now.isoformat()
    closed = [
        (INTENT_KIND, keys.get(type_, ""), {**_kept(i), "completed_at": stamp, "repaired_at": stamp})
        for type_, i in intended.items()
        if type_ in keys
    ]
    ledger.put_many(closed)
    logger.warning("act record repaired", extra={"event_id": event_id, "resource": decision.resource, "done": done})
    return 1


def _decision(data: Mapping[str, Any]) -> Decision:
    """A decision as the intent stored it, its actions read back into their own classes (each capability's fields):
    the union is the registry's, composed from the capabilities' packages, so it is loaded only when a repair runs."""
    from governor.registry import REGISTRY

    actions = [REGISTRY.parse_action(action) for action in data.get("actions") or []]
    return Decision.model_validate({**data, "actions": []}).model_copy(update={"actions": actions})


def _kept(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in ("pk", "sk", "kind", "at")}
