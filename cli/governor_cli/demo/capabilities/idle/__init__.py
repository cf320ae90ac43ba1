"""Idle's scenarios: the warning an owner gets before an idle GPU instance is stopped (with its buttons), and, in the
demo, the sweep at every tick of the simulated day and the EKS cluster whose node it drains (``eks``)."""

from __future__ import annotations

import uuid

from governor.domain.decision import Finding


def warning_finding(resource: str) -> Finding:
    """The warning before an idle instance is stopped: posted with Keep and Stop now (``governor.interactions``)."""
    return Finding(
        policy="idle",
        rule="idle.warned",
        severity="warning",
        resource=resource,
        title=f"Idle GPU instance {resource} will be stopped",
        team="vision",
        owner="alice@example.com",
        event_id=str(uuid.uuid4()),
    )
