"""The ``spot`` capability, declared: interruption and capacity warnings, checkpoint, record, relaunch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from governor.capability import Capability, Trigger, Uses
from governor.domain.actions import Checkpoint, Notify, Record
from governor.spot.actions import CompleteLifecycleAction, Deregister, Replace
from governor.spot.policy import SpotPolicy

if TYPE_CHECKING:
    from governor.domain.decision import Finding

#: A rebalance recommendation is advice (the instance may run for hours more): it waits for the channel's digest.
REBALANCE_RULE = "spot-rebalance"


def an_interruption_is_coming(finding: Finding) -> bool:
    """Due at once: an interruption warning (AWS's two minutes), a capacity reservation or block ending; a rebalance
    recommendation is not (``notifications.immediate: due``)."""
    return finding.rule != REBALANCE_RULE


CAPABILITY = Capability(
    name="spot",
    demo="governor_cli.demo.capabilities.spot",
    construct="infra.constructs.spot:Spot",
    construct_id="Spot",
    acknowledgeable=True,
    time_bound=True,
    due=an_interruption_is_coming,
    member_accounts=True,
    findings="governor.spot.findings",
    section="spot",
    section_model=SpotPolicy,
    description="Spot interruptions: checkpoint within the two-minute warning, record, notify, relaunch",
    triggers=(
        Trigger(
            "Interruption",
            "rule",
            "EC2 Spot and capacity-reservation interruption warnings, Capacity Block expiry warnings, rebalance "
            "recommendations; Capacity Block delivered, capacity reservation states, lent capacity reclaimed",
        ),
        Trigger("StateChange", "rule", "EC2 instance stopped / terminated (completes interruption records)"),
        Trigger(
            "CheckpointStatus",
            "rule",
            "SSM Run Command finished (checkpoint status; releases held Auto Scaling lifecycle actions)",
        ),
    ),
    # The reservation a capacity event names is read before anything is done about it (issue 45.4).
    uses=(
        Uses("governor.adapters.ec2"),
        Uses("governor.adapters.ssm"),
        Uses("governor.adapters.capacity"),
        Uses("governor.spot.recovery", ()),
    ),
    actions=(Checkpoint, Deregister, CompleteLifecycleAction, Replace, Record, Notify),
    # The in-progress idempotency record lapses after 40 s, not at the function's 180 s timeout: when the record's
    # write answer is lost, Lambda's first retry (about a minute later) runs within the two-minute warning.
    in_progress_seconds=40,
)
