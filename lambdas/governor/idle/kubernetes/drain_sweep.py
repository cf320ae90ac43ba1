"""The sweep's side of a Kubernetes reclaim (``drain``): what its findings say, and the drains no decision of this
sweep carried on.

A drain runs as the ``terminate`` action of an idle decision (``Terminate(via="kubernetes")``): while it is not over
the instance keeps its idle mark, so the next sweep decides "act" again and the action resumes the drain where the
ledger says it stopped, instead of warning afresh. The owner's finding is the drain's transition (cordoned and
blocked, removing, terminated, given up), never the decision's "terminated" title; a pass that changed nothing says
nothing, except a drain that cannot go on, which says so every pass. A drain whose instance is not acted on this
sweep is followed up here: confirmed gone when its instance no longer runs, given up (un-cordoned, and said) when the
instance is busy, exempt or snoozed now or the drain has run out of time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from governor.domain.actions import Outcome
from governor.domain.decision import Action, Decision, Finding
from governor.idle.kubernetes.drain import ENDING, give_up, node_present, store, stuck
from governor.idle.kubernetes.drain_state import DRAIN_KIND, Drain, begun, finding_of, give_up_reason, summary
from governor.observability import logger
from governor.outbox import finding_id

DRAIN_RULE = "idle.drain"
#: Outcomes that say the instance no longer wants reclaiming: a drain of it gives up and un-cordons. Missing data
#: (unmonitored) is not one: the drain waits, bounded by ``drain_state.MAX_AGE``.
NO_LONGER_IDLE = frozenset({"busy", "stalled", "exempt", "snoozed", "grace"})


def through_cluster(action: Action) -> bool:
    """A reclaim carried out by draining the node through its cluster's API."""
    return action.type == "terminate" and getattr(action, "via", None) == "kubernetes"


def unfinished_drain(results: Sequence[tuple[Action, Outcome]]) -> bool:
    """This decision's drain ran and is not over (its idle-action tag would claim a reclaim that did not happen)."""
    return any(through_cluster(action) and not outcome.ok for action, outcome in results)


def not_reclaimed() -> Outcome:
    """The idle-action tag's outcome while the node is not reclaimed: not written, and why."""
    return Outcome(ok=False, error_code="NotReclaimed", message="not tagged: the node's drain is not over")


def drain_finding(finding: Finding, outcome: Any, ledger: Any, event_id: str) -> Finding | None:
    """The sweep's finding for a decision whose drain ran now: titled by what the drain did, with an id per
    transition; None when the pass changed nothing worth telling. Any other finding is returned as it is."""
    if not any(through_cluster(a) for a in outcome.decision.enforced_actions()):
        return finding
    drain = Drain.from_item(ledger.get_item(DRAIN_KIND, outcome.instance.id))
    if drain is None or drain.last_event != event_id:
        return finding  # the drain did not run in this sweep (held back by the re-read): the finding says why
    said = finding_of(drain, outcome.instance.type)
    if said is None:
        return None
    title, key = said
    return finding.model_copy(
        update={"title": title, "id": finding_id(key, drain.instance_id, DRAIN_RULE), "severity": _severity(drain)}
    )


def _severity(drain: Drain) -> str:
    return "info" if drain.state in ("gone", "removing") else "warning"


def follow_up(
    outcomes: Sequence[Any],
    ledger: Any,
    aws: Any,
    event_id: str,
    now: dt.datetime,
    make_finding: Callable[[Decision, str, Any], Finding],
) -> tuple[list[Decision], list[Finding]]:
    """Every active drain no decision of this sweep carried on: the decisions recorded and the findings owed. A sweep
    that reaches no cluster (no cluster drains here) has none and reads nothing."""
    if getattr(aws, "nodes", None) is None:
        return [], []
    by_id = {o.instance.id: o for o in outcomes}
    decisions: list[Decision] = []
    findings: list[Finding] = []
    for item in ledger.query_kind(DRAIN_KIND):
        drain = Drain.from_item(item)
        if drain is None or not drain.active or drain.last_event == event_id:
            continue
        outcome = by_id.get(drain.instance_id)
        after = _follow(drain, outcome, aws, event_id, now)
        if after is None:
            continue
        store(ledger, after)
        decision = Decision(
            policy="idle",
            verdict="act" if after.state != drain.state else "ok",
            resource=drain.instance_id,
            reasons=[summary(after)],
            evidence={"status": "drain", "drain": after.to_item()},
            severity="info" if after.state == "gone" else "warning",
            rule=DRAIN_RULE,
        )
        decisions.append(decision)
        said = finding_of(after, outcome.instance.type if outcome is not None else "")
        if said is not None:
            title, key = said
            found = make_finding(decision, title, outcome.instance if outcome is not None else None)
            findings.append(found.model_copy(update={"id": finding_id(key, drain.instance_id, DRAIN_RULE)}))
    return decisions, findings


def _follow(drain: Drain, outcome: Any, aws: Any, event_id: str, now: dt.datetime) -> Drain | None:
    """The drain after this sweep's follow-up (reads only, and an un-cordon when it gives up), or None when it is
    left as it stands."""
    live = aws.instances.instance(drain.instance_id) if outcome is None else outcome.instance
    if live is None or live.state in ENDING:
        confirmed = f"instance {drain.instance_id} is {live.state if live is not None else 'gone'}"
        return replace(begun(drain, event_id, now), state="gone", problem=None).step(now, confirmed)
    status = outcome.outcome if outcome is not None else None
    try:
        api = aws.nodes.api(drain.cluster)
        drain = begun(drain, event_id, now)
        if status in NO_LONGER_IDLE and drain.state != "removing":
            why = f"the instance is {status} now: {'; '.join(outcome.decision.reasons[:1])}"
            return give_up(api, drain, why, now, [])
        if not node_present(api, drain):
            if drain.state == "removing":
                return replace(drain, state="gone", problem=None).step(now, f"node {drain.node} is gone")
            why = f"no node of cluster {drain.cluster} is instance {drain.instance_id} (it left the cluster)"
            return stuck(replace(drain, state="no-path"), now, why)
    except Exception as error:  # the cluster cannot be reached: recorded, tried again next sweep
        logger.warning("drain follow-up: cluster unreachable", extra={"cluster": drain.cluster, "error": str(error)})
        return None
    timed_out = give_up_reason(drain, now)
    return give_up(api, drain, timed_out, now, []) if timed_out is not None else None
