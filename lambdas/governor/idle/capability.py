"""The ``idle`` capability, declared: GPU instances idle by every signal are warned about, then stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from governor.capability import Capability, Trigger, Uses
from governor.core_policy import CorePolicy, ExemptingTags, section_of
from governor.domain.actions import Checkpoint, Notify, Tag, Untag, Warn
from governor.idle.actions import Stop, Terminate
from governor.idle.policy import IdlePolicy
from governor.idle.teardown_actions import SnapshotVolumes

if TYPE_CHECKING:
    from governor.domain.decision import Finding


def _idle(policy: CorePolicy) -> IdlePolicy:
    return section_of(policy, "idle", IdlePolicy)


def _reads_clusters_from(source: str) -> Uses:
    """An EKS cluster's own metrics adapter, used when a cluster of ``idle.clusters`` names it."""
    return Uses(
        f"governor.idle.kubernetes.{source}",
        when=lambda policy: any(c.metric_source == source for c in _idle(policy).clusters),
    )


def a_stop_will_happen(finding: Finding) -> bool:
    """An idle finding is due only when it warns of a stop or terminate that will happen: a report-only warning, an
    instance only ever reported, a stop already done or an unused reservation can wait for the channel's digest. An
    owner's digest of warnings is due when one of its warnings is."""
    if finding.members:
        return any(a_stop_will_happen(member) for member in finding.members)
    return any(a.get("type") == "warn" and a.get("enforced") and a.get("planned") in _STOPS for a in finding.actions)


#: What an enforced idle warning plans when a stop will happen (an instance only ever reported plans neither).
_STOPS = frozenset({"stop", "terminate"})


def capacity_offered_to_a_team(policy: CorePolicy) -> None:
    """``idle.reserved_capacity: offer`` names the team told of free capacity, and that team has a route."""
    idle = _idle(policy)
    if idle.reserved_capacity != "offer":
        return
    team = idle.offer_capacity_to
    if not team:
        raise ValueError("idle.reserved_capacity is offer, so idle.offer_capacity_to must name the team to tell")
    if team not in policy.notifications.teams:
        raise ValueError(
            f"idle.offer_capacity_to: {team!r} is not a team of notifications.teams "
            f"({', '.join(sorted(policy.notifications.teams)) or 'none configured'})"
        )


CAPABILITY = Capability(
    name="idle",
    stale_outbox="every",
    repairs_acts=True,
    demo="governor_cli.demo.capabilities.idle",
    construct="infra.constructs.idle:IdleReclamation",
    construct_id="Idle",
    time_bound=True,
    due=a_stop_will_happen,
    episode_starts=frozenset({"idle.warned", "idle.warned-digest"}),  # governor.idle.digest's two rules
    episode_withdrawals=frozenset({"idle.resumed"}),  # governor.idle.domain.RESUMED
    breakers=True,
    member_accounts=True,
    fans_out=True,
    findings="governor.idle.findings",
    section="idle",
    section_model=IdlePolicy,
    checks=(capacity_offered_to_a_team,),
    exempting_tags=lambda policy: ExemptingTags("idle", "idle.exemptions.tags", _idle(policy).exemptions.tags),
    idle_time="governor.idle.costs:IDLE_TIME",
    fleet_signals="governor.idle.published:fleet_signals",
    description="Warns about, then stops or terminates, GPU instances idle by every signal (idle policy)",
    triggers=(
        Trigger(
            "Sweep",
            "schedule",
            "idle sweep: GPU metrics of every running GPU instance, then warn, act or hold back",
            schedule="idle.schedule",
        ),
    ),
    uses=(
        Uses("governor.adapters.ec2"),
        Uses("governor.idle.metrics"),
        Uses("governor.adapters.capacity"),
        Uses("governor.adapters.volumes"),  # what stopped GPU instances still bill (governor.idle.money)
        Uses("governor.adapters.hyperpod"),
        Uses("governor.adapters.instance_types"),
        # An EKS cluster's own metrics: Amazon Managed Prometheus (query only) or Container Insights.
        _reads_clusters_from("prometheus"),
        _reads_clusters_from("container_insights"),
        Uses("governor.adapters.ssm"),
        Uses("governor.idle.autoscaling", ()),
    ),
    actions=(Tag, Untag, Warn, Notify, Checkpoint, Stop, Terminate, SnapshotVolumes),
    sections=("idle", "pricing"),  # the dearest idle instance acts first; findings carry its hourly price
)
