"""``governor explain``: one decision per policy that handles an event, from the event and the policy alone.

Each registered capability's explaining module (``explain``, or ``domain`` where a capability has no ``explain``
module) is imported on first use (``governor.registry``), so a new capability needs no edit here; its explainers
register themselves with :func:`governor.domain.explain.explainer`. Not runtime code: no Lambda handler explains,
and the code asset leaves this module out (``infra/asset.py``).
"""

from __future__ import annotations

import importlib
from typing import Any

from governor.domain.decision import Decision, strongest
from governor.domain.explain import Registration, registered
from governor.events.envelopes import InboundEvent, normalise
from governor.policy import Policy

_LOADED = False


def _load_policies() -> None:
    global _LOADED
    if _LOADED:
        return
    from governor.registry import REGISTRY

    for capability in REGISTRY.values():
        importlib.import_module(capability.explains)
    _LOADED = True


def registrations() -> list[Registration]:
    """Every registered explainer, every capability's module loaded first."""
    _load_policies()
    return registered()


def explain_event(event: InboundEvent, policy: Policy) -> dict[str, Any]:
    """One decision per policy that handles the event; the top verdict is the strongest of them."""
    decisions: list[Decision] = []
    for registration in registrations():
        if registration.matches(event):
            decisions.extend(registration.func(event, policy))
    return {
        "verdict": strongest(d.verdict for d in decisions),
        "event": {"id": event.id, "kind": event.kind},
        "decisions": [d.public() for d in decisions],
    }


def explain(raw: Any, policy: Policy) -> dict[str, Any]:
    """Raises ``InvalidEventError`` for input that is neither an EventBridge event nor a CloudTrail record."""
    return explain_event(normalise(raw), policy)
