"""``governor explain``'s registrations: every policy that handles an event decides on it, from the event and the
policy alone.

Policies register an explainer with :func:`explainer` in their capability's ``explain`` module. An explainer states
no rule of its own: it builds the live state the handler would read from AWS as the event implies it
(:class:`Assumed`, each assumption printed), and calls the very decision functions the handler calls, which it names
in ``decides`` (a test holds both sides to it). :mod:`governor.explain` loads every registered capability's
explainers and runs them; this module imports no capability and not the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from governor.domain.decision import Decision
from governor.events.envelopes import InboundEvent

Matcher = Callable[[InboundEvent], bool]
#: An explainer: the event and the composed policy (``governor.policy.Policy``, which sits above the shared domain).
Explainer = Callable[[InboundEvent, Any], list[Decision]]
State = TypeVar("State")


@dataclass(frozen=True)
class Registration:
    """One explainer: the policy section, the events it takes, and the handler's decision functions it calls."""

    policy: str
    matches: Matcher
    func: Explainer
    decides: tuple[Callable[..., Any], ...]


_REGISTRY: list[Registration] = []


def explainer(
    policy: str, matches: Matcher, *, decides: Iterable[Callable[..., Any]] = ()
) -> Callable[[Explainer], Explainer]:
    """Register ``func`` as the ``policy`` section's explainer for events ``matches`` accepts; ``decides`` names the
    decision functions (shared with the handler) it calls, so a test can check that no rule is stated twice."""

    def register(func: Explainer) -> Explainer:
        _REGISTRY.append(Registration(policy, matches, func, tuple(decides)))
        return func

    return register


def registered() -> list[Registration]:
    """The explainers registered so far, in registration order (``governor.explain`` loads them all first)."""
    return list(_REGISTRY)


@dataclass(frozen=True)
class Assumed(Generic[State]):
    """Live state ``explain`` cannot read, stood in for by what the event implies, with each assumption in words.

    The handler reads ``state`` from AWS (or the ledger) at run time; ``explain`` hands this one to the same decision
    function instead, so what a user previews is decided by the code that runs.
    """

    state: State
    assumptions: tuple[str, ...]

    def on(self, decision: Decision) -> Decision:
        """``decision`` with these assumptions first, each marked ``assumed:``, then the decision's own."""
        stated = [f"assumed: {text}" for text in self.assumptions]
        return decision.model_copy(update={"assumptions": [*stated, *decision.assumptions]})


def cloudtrail_call(source: str, *names: str) -> Matcher:
    """Matches "AWS API Call via CloudTrail" events from ``source`` (e.g. ``aws.ec2``) for the given API names."""
    wanted = set(names)

    def matches(event: InboundEvent) -> bool:
        return event.cloudtrail is not None and event.source == source and event.cloudtrail.event_name in wanted

    return matches


def detail_type(source: str, *types: str) -> Matcher:
    wanted = set(types)
    return lambda event: event.source == source and event.detail_type in wanted
