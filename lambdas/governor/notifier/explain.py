"""``governor explain`` for the notifier: where a finding would go, by the notifier's own ``decide_notification``.
Not runtime code: the code asset leaves every ``explain`` module out (``infra/asset.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from governor.domain.decision import Decision, Finding
from governor.domain.explain import Assumed, detail_type, explainer
from governor.events.envelopes import InboundEvent, InvalidEventError
from governor.notifier import domain
from governor.policy import Policy


@explainer(
    "notifications", detail_type("gpu-fleet-governor", "Governor Finding"), decides=(domain.decide_notification,)
)
def explain_finding(event: InboundEvent, policy: Policy) -> list[Decision]:
    """Where a finding would go, by the notifier's ``decide_notification``; the merge state is assumed empty."""
    try:
        finding = Finding.model_validate(event.detail)
    except ValidationError as error:
        raise InvalidEventError(f"invalid Governor Finding: {error.errors()[0]['msg']}", event.id) from None
    window = policy.notifications.merge_window_minutes
    assumed: Assumed[Mapping[str, Any] | None] = Assumed(
        None,
        (
            f"merge state not read: no finding about {finding.resource} / {finding.rule} was sent in the last "
            f"{window} min (else this one would be merged instead of sent)",
        ),
    )
    at = event.time or finding.at
    plan = domain.decide_notification(finding, policy.notifications, lambda: assumed.state, at)
    return [assumed.on(plan.decision) if plan.step is not None else plan.decision]
