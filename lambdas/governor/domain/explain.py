"""``governor explain``: every policy that handles an event decides on it, from the event and the policy alone.

Policies register an explainer with :func:`explainer`; modules under ``governor.domain`` are imported on first
use so a new capability needs no edit here. Whatever a policy would read from AWS at run time it lists under
``assumptions``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from governor.domain.decision import Decision, strongest
from governor.events.envelopes import InboundEvent, normalise
from governor.policy import Policy

Matcher = Callable[[InboundEvent], bool]
Explainer = Callable[[InboundEvent, Policy], list[Decision]]

_REGISTRY: list[tuple[str, Matcher, Explainer]] = []
_LOADED = False


def explainer(policy: str, matches: Matcher) -> Callable[[Explainer], Explainer]:
    """Register ``func`` as the ``policy`` section's explainer for events ``matches`` accepts."""

    def register(func: Explainer) -> Explainer:
        _REGISTRY.append((policy, matches, func))
        return func

    return register


def cloudtrail_call(source: str, *names: str) -> Matcher:
    """Matches "AWS API Call via CloudTrail" events from ``source`` (e.g. ``aws.ec2``) for the given API names."""
    wanted = set(names)

    def matches(event: InboundEvent) -> bool:
        return event.cloudtrail is not None and event.source == source and event.cloudtrail.event_name in wanted

    return matches


def detail_type(source: str, *types: str) -> Matcher:
    wanted = set(types)
    return lambda event: event.source == source and event.detail_type in wanted


def _load_policies() -> None:
    global _LOADED
    if _LOADED:
        return
    import governor.domain as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"governor.domain.{module.name}")
    _LOADED = True


def explain_event(event: InboundEvent, policy: Policy) -> dict[str, Any]:
    """One decision per policy that handles the event; the top verdict is the strongest of them."""
    _load_policies()
    decisions: list[Decision] = []
    for _name, matches, func in _REGISTRY:
        if matches(event):
            decisions.extend(func(event, policy))
    return {
        "verdict": strongest(d.verdict for d in decisions),
        "event": {"id": event.id, "kind": event.kind},
        "decisions": [d.public() for d in decisions],
    }


def explain(raw: Any, policy: Policy) -> dict[str, Any]:
    """Raises ``InvalidEventError`` for input that is neither an EventBridge event nor a CloudTrail record."""
    return explain_event(normalise(raw), policy)
