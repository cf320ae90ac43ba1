"""What an idle sweep reads back for the act records it repairs (:func:`governor.acts.repair`): a stop or terminate
whose outcome was never written is confirmed by the instance's state (stopped, terminating or gone: it was done;
still running: it was not), so the ledger shows the act that happened, whatever failed after it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from governor.acts import Confirm
from governor.domain.actions import Outcome
from governor.domain.decision import Action
from governor.domain.fleet import Instance

#: States that confirm a stop or terminate was made (the instance no longer runs, or is gone).
RECLAIMED = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


class Instances(Protocol):
    def instance(self, instance_id: str) -> Instance | None: ...


def confirm_reclaims(instances: Instances) -> Confirm:
    """A stop or terminate of an instance, read back from its state; anything else: None (cannot tell)."""

    def confirm(action: Action, intent: Mapping[str, Any]) -> Outcome | None:
        resource = str(intent.get("resource") or "")
        if action.type not in ("stop", "terminate") or not resource.startswith("i-"):
            return None
        live = instances.instance(resource)
        state = live.state if live is not None else "gone"
        if live is None or state in RECLAIMED:
            verb = {"stop": "stopped", "terminate": "terminated"}[action.type]
            return Outcome(ok=True, done=f"{verb} (the instance is {state}: read back by a later sweep)")
        if getattr(action, "via", None):  # through its Auto Scaling group or cluster: the state alone cannot say
            return None
        why = f"the instance is still {state}"
        return Outcome(ok=False, error_code="NotDone", message=why, done=f"{action.type} not done: {why}")

    return confirm
