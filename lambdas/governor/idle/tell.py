"""Who hears of an idle decision and under which id: the owner (tags, else the creator the ledger recorded), the
finding built from a decision, and the ids that make one message per idle episode or spell however often a sweep,
a retry or a Stop now click sends it.
"""

from __future__ import annotations

from governor.domain.decision import Decision, Finding
from governor.domain.fleet import LAUNCH_KIND, Instance, Ownership, ownership
from governor.events.envelopes import GovernorEvent
from governor.idle.domain import Mark
from governor.outbox import finding_id
from governor.runtime import Runtime


def owner(instance: Instance, runtime: Runtime) -> Ownership:
    """The owner and team tags, else the ``governor:creator`` tag, else the creator lifecycle recorded from CloudTrail
    (the report attributes the instance to the same person): a warning never says "unknown" when the ledger knows."""
    who = ownership(instance.tags, runtime.policy.fleet)
    if who.source != "unknown":
        return who
    launch = runtime.ledger.get_item(LAUNCH_KIND, instance.id) or {}
    creator = str(launch.get("creator") or "").strip()
    return Ownership(owner=creator, team=who.team, source="creator") if creator else who


def finding_for(
    decision: Decision, title: str, instance: Instance | None, event: GovernorEvent, runtime: Runtime
) -> Finding:
    """The finding of one idle decision: its owner and team, where it happened, and what the instance costs an hour."""
    who = owner(instance, runtime) if instance else None
    price = runtime.policy.pricing.prices.get(instance.type) if instance else None
    return Finding.from_decision(
        decision,
        title,
        owner=who.owner if who else None,
        team=who.team if who else None,
        account=event.account,
        region=event.region or runtime.region,
        event_id=event.id,
        usd_per_hour=price.on_demand if price is not None and price.on_demand else None,
    )


def warning_finding_id(instance_id: str, mark: Mark, enforce: bool) -> str:
    """One id per idle episode (and enforcement setting): every sweep that re-sends an unpublished warning sends the
    same finding, and an earlier attempt's acceptance is found again."""
    return finding_id(f"idle-warning#{mark.idle_since.isoformat()}#{enforce}", instance_id, "idle.warned")


def reclaim_finding_id(instance_id: str, spell: Mark | None, event_id: str) -> str:
    """One id per idle spell for "stopped" / "terminated": a sweep and Stop now clicks that all pass the re-read post
    one message, since the outbox keeps the id's acceptance and the notifier delivers an id once."""
    scope = f"idle-reclaim#{spell.idle_since.isoformat()}" if spell is not None else event_id
    return finding_id(scope, instance_id, "idle.acted")
