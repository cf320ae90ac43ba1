"""Spot interruptions: turn the two-minute warning into a checkpoint, a record, a message and, optionally, capacity.

Pure decisions over the policy, the re-read instance and the interruption record kept in the ledger. The handler
(``spot/handler.py``) records each decision, then acts through the ports in ``spot/ports.py``; ``governor explain``
runs the same code on the event alone and lists what it could not read under ``assumptions``. The events and their
typed ``detail`` are parsed in ``spot/events.py``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from governor.domain.actions import AnyAction, Checkpoint, Notify, Record
from governor.domain.decision import Decision
from governor.domain.fleet import Instance, checkpoint_choice, exemption, ownership
from governor.domain.interruptions import FINAL_COMMAND_STATUSES, RECORD_KIND, InterruptionRecord
from governor.policy import Policy
from governor.spot.actions import CompleteLifecycleAction, Deregister, Replace
from governor.spot.ports import Candidate

POLICY = "spot"
#: Instances in a block begin terminating this long before its end (the warning comes 10 minutes before that).
BLOCK_TERMINATION_LEAD = dt.timedelta(minutes=30)
FINAL_STATES = ("stopped", "terminated")
REBALANCE_KIND = "rebalance"
ASG_TAG = "aws:autoscaling:groupName"
FLEET_TAGS = ("aws:ec2spot:fleet-request-id", "aws:ec2:fleet-id")
GONE_STATES = ("shutting-down", "terminated", "stopping", "stopped")


@dataclass(frozen=True)
class Notice:
    """Which interruption notice a warning decision answers: who gets it, and when termination begins."""

    kind: Literal["spot", "capacity-reservation", "capacity-block"]
    deadline: dt.datetime
    reservation_id: str | None = None

    @property
    def lifecycle(self) -> str:
        return {"spot": "spot", "capacity-reservation": "interruptible-capacity-reservation"}.get(
            self.kind, "capacity-block"
        )

    @property
    def rule(self) -> str:
        return {"spot": "spot-interruption", "capacity-reservation": "capacity-reservation-interruption"}.get(
            self.kind, "capacity-block-expiry"
        )

    @property
    def label(self) -> str:
        return {
            "spot": "Spot interruption",
            "capacity-reservation": "Capacity reservation interruption",
            "capacity-block": "Capacity Block expiry",
        }[self.kind]

    def seconds_left(self, at: dt.datetime) -> float:
        return max(0.0, (self.deadline - at).total_seconds())

    def evidence(self, at: dt.datetime) -> dict[str, Any]:
        found: dict[str, Any] = {
            "notice": self.kind,
            "terminates_at": self.deadline.isoformat(),
            "seconds_left": round(self.seconds_left(at)),
        }
        if self.reservation_id:
            found["reservation_id"] = self.reservation_id
        return found


def spot_notice(at: dt.datetime) -> Notice:
    """Spot's warning: about two minutes, best effort."""
    return Notice("spot", at + dt.timedelta(minutes=2))


def reservation_notice(at: dt.datetime, termination: dt.datetime | None) -> Notice:
    """The interruptible reservation's warning: its ``instance-termination-time``, else two minutes from the event."""
    return Notice("capacity-reservation", termination or at + dt.timedelta(minutes=2))


def block_notice(reservation_id: str, end: dt.datetime) -> Notice:
    """The Capacity Block's warning: instances begin terminating 30 minutes before the block's ``end-date``."""
    return Notice("capacity-block", end - BLOCK_TERMINATION_LEAD, reservation_id)


# --- decisions -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointPlan:
    """What runs on the instance: always a string from the policy; the tag can only pick an allow-list ``name``.

    ``problem`` says why the tag was not honoured; ``blocked`` why nothing can be sent (the SendCommand grant is
    limited to instances carrying ``fleet.fleet_tags``).
    """

    command: str
    source: Literal["tag", "policy"]
    timeout_seconds: int
    name: str | None = None
    problem: str | None = None
    blocked: str | None = None

    def notes(self) -> list[str]:
        return [note for note in (self.problem, self.blocked) if note]


def checkpoint_plan(tags: Mapping[str, str], policy: Policy) -> CheckpointPlan:
    """The command the instance's tag names in ``fleet.checkpoint_commands``, else ``spot.checkpoint_command``.

    An unknown name (or a command written into the tag) is reported and never run; the timeout stays under the warning.
    """
    choice = checkpoint_choice(dict(tags), policy.fleet, policy.spot.checkpoint_command)
    blocked = None
    if not policy.fleet.carries_fleet_tags(dict(tags)):
        wanted = ", ".join(f"{k}={v}" for k, v in policy.fleet.fleet_tags.items())
        blocked = f"no checkpoint sent: the instance lacks fleet.fleet_tags ({wanted})"
    return CheckpointPlan(
        choice.command or policy.spot.checkpoint_command,
        choice.source,
        policy.spot.checkpoint_timeout_seconds,
        name=choice.name,
        problem=choice.problem,
        blocked=blocked,
    )


def _checkpoint_action(policy: Policy, plan: CheckpointPlan) -> Checkpoint:
    """Enforced only when the policy enforces and the instance may receive commands at all."""
    details: dict[str, Any] = {"command": plan.command, "source": plan.source, "timeout_seconds": plan.timeout_seconds}
    if plan.name:
        details["name"] = plan.name
    if plan.blocked:
        details["blocked"] = plan.blocked
    return Checkpoint(enforced=policy.spot.enforce and plan.blocked is None, **details)


def candidates(instance_type: str, policy: Policy) -> list[Candidate]:
    """Ordered relaunch candidates: each fallback type (or the instance's own), in each fallback zone (or any)."""
    types = list(dict.fromkeys(policy.spot.fallback_instance_types)) or [instance_type]
    zones: list[str | None] = list(dict.fromkeys(policy.spot.fallback_zones)) or [None]
    return [Candidate(t, z) for t in types for z in zones]


def _age_seconds(instance: Instance, at: dt.datetime) -> float:
    return max(0.0, (at - instance.launch_time).total_seconds())


def _not_actionable(
    instance_id: str, instance: Instance | None, policy: Policy, now: dt.datetime, notice: Notice | None = None
) -> str | None:
    """Why an instance is left alone: gone, outside the GPU fleet, or exempt. None: it is ours to protect.

    Each notice concerns one purchase model: Spot's warnings Spot instances, the reservation warning instances in an
    interruptible reservation, the block's expiry instances in that very block.
    """
    if instance is None:
        return f"{instance_id} no longer exists; nothing to checkpoint (recorded, not retried)"
    if instance.state in GONE_STATES:
        return f"{instance_id} is already {instance.state}; nothing to checkpoint (recorded, not retried)"
    if instance.state != "running":
        return f"{instance_id} is {instance.state}, not running; a warning about it is not acted on"
    if notice is not None and notice.kind != "spot":
        if instance.lifecycle != notice.lifecycle:
            return (
                f"{instance_id} is {instance.lifecycle}, not {notice.lifecycle}: a {notice.label.lower()} warning "
                f"concerns {notice.lifecycle} capacity only"
            )
        if notice.reservation_id and instance.capacity_reservation_id != notice.reservation_id:
            where = instance.capacity_reservation_id or "no reservation"
            return f"{instance_id} runs in {where}, not {notice.reservation_id}"
    elif instance.lifecycle != "spot":
        # Only Spot capacity gets these warnings and rebalance recommendations (capacity reservations and Capacity
        # Blocks have events of their own): one about an On-Demand instance is not AWS's, whoever sent it.
        return (
            f"{instance_id} is {instance.lifecycle}, not a Spot instance: Spot interruption warnings and rebalance "
            "recommendations concern Spot capacity only"
        )
    if not policy.fleet.is_gpu_type(instance.type):
        return f"{instance.type} is not in the GPU fleet (families {', '.join(policy.fleet.gpu_families)})"
    why = exemption(
        instance.id, instance.tags, policy.fleet, policy.spot.exemptions, now, refused=instance.refused_keys
    )
    if why:
        return f"exempt: {why}"
    return None


def elsewhere(
    event_account: str | None, event_region: str | None, account: str | None, region: str | None
) -> str | None:
    """Why an EC2 event cannot be about the instance the function would read: it names another account or region
    than the one its adapters read (the function's own, or the member account it acts in through the spoke role).

    EventBridge sets both fields to where the event happened; a direct Invoke can set anything, and an instance id
    from another account or region must never be resolved against this one.
    """
    if account and event_account != account:
        return f"the event is about account {event_account or '(none)'}, the function reads account {account}"
    if region and event_region != region:
        return f"the event is about region {event_region or '(none)'}, the function reads region {region}"
    return None


def _evidence(instance: Instance, at: dt.datetime, policy: Policy) -> dict[str, Any]:
    who = ownership(instance.tags, policy.fleet)
    return {
        "instance_type": instance.type,
        "zone": instance.zone,
        "lifecycle": instance.lifecycle,
        "launched_at": instance.launch_time.isoformat(),
        "age_seconds": round(_age_seconds(instance, at), 1),
        "owner": who.owner,
        "team": who.team,
        "auto_scaling_group": instance.tags.get(ASG_TAG),
        "launch_template_id": instance.launch_template_id,
    }


def replacement_blocker(instance: Instance, policy: Policy) -> str | None:
    """Why no replacement is launched for this instance, or None when the policy asks for one and it can be made."""
    if policy.spot.replacement == "none":
        return "replacement is off (spot.replacement: none)"
    if instance.tags.get(ASG_TAG):
        return f"Auto Scaling group {instance.tags[ASG_TAG]} replaces its own instances"
    fleet_tag = next((tag for tag in FLEET_TAGS if instance.tags.get(tag)), None)
    if fleet_tag:
        return f"the fleet {instance.tags[fleet_tag]} keeps its own capacity"
    if not instance.launch_template_id:
        return "not launched from a launch template, so there is nothing to relaunch from"
    return None


def _warning_actions(
    policy: Policy,
    plan: CheckpointPlan,
    *,
    owner: str,
    team: str,
    auto_scaling_group: str | None,
    replace_from: tuple[str, str | None] | None,
    instance_type: str,
) -> list[AnyAction]:
    enforce = policy.spot.enforce
    actions: list[AnyAction] = [_checkpoint_action(policy, plan)]
    if policy.spot.deregister_from_target_groups:
        actions.append(Deregister(enforced=enforce, target_groups="every target group listing it"))
    if auto_scaling_group and policy.spot.complete_lifecycle_action:
        actions.append(
            CompleteLifecycleAction(
                enforced=enforce,
                auto_scaling_group=auto_scaling_group,
                when="after the checkpoint command finishes (or at once when it could not be delivered)",
            )
        )
    if replace_from is not None:
        template, version = replace_from
        actions.append(
            Replace(
                enforced=enforce,
                market=policy.spot.replacement,
                launch_template=template,
                version=version or "$Default",
                candidates=[
                    {"instance_type": c.instance_type, "zone": c.zone or "any"}
                    for c in candidates(instance_type, policy)
                ],
            )
        )
    actions.append(Record(enforced=enforce, kind=RECORD_KIND))
    actions.append(Notify(enforced=enforce, owner=owner, team=team))
    return actions


def _ignored(resource: str, reason: str, rule: str, evidence: dict[str, Any] | None = None) -> Decision:
    """Recorded and left alone (gone, not a GPU Spot instance, exempt, not the governor's, not final yet): a retry
    finds the decision and never loops on the resource."""
    return Decision(
        policy=POLICY, verdict="ignored", resource=resource, reasons=[reason], evidence=evidence or {}, rule=rule
    )


def decide_warning(
    instance_id: str,
    instance: Instance | None,
    instance_action: str,
    policy: Policy,
    at: dt.datetime,
    notice: Notice | None = None,
) -> Decision:
    """An interruption warning for a re-read instance: checkpoint, deregister, record, notify (and replace).

    ``notice`` says which warning it is (Spot's by default; an interruptible reservation's; a Capacity Block's
    expiry): the same checkpoint path, with the time left computed from the event. Gone, non-GPU, exempt instances
    and instances of another purchase model are recorded as ``ignored`` so a retry never loops on them.
    """
    notice = notice or spot_notice(at)
    why_not = _not_actionable(instance_id, instance, policy, at, notice)
    base = {"instance_action": instance_action, **notice.evidence(at)}
    if why_not or instance is None:
        return _ignored(
            instance_id,
            why_not or f"{instance_id} no longer exists",
            notice.rule,
            evidence={**base, **(_evidence(instance, at, policy) if instance else {})},
        )
    plan = checkpoint_plan(instance.tags, policy)
    left = notice.seconds_left(at)
    if notice.kind != "spot" and left < plan.timeout_seconds:
        plan = replace(plan, timeout_seconds=max(10, int(left)))  # the job's time is what the event leaves it
    who = ownership(instance.tags, policy.fleet)
    blocker = replacement_blocker(instance, policy)
    template = (instance.launch_template_id or "", instance.launch_template_version) if blocker is None else None
    actions = _warning_actions(
        policy,
        plan,
        owner=who.owner,
        team=who.team,
        auto_scaling_group=instance.tags.get(ASG_TAG),
        replace_from=template,
        instance_type=instance.type,
    )
    if notice.kind == "spot":
        first = (
            f"Spot will {instance_action} {instance.type} {instance.id} in {instance.zone or 'its zone'} in about two "
            f"minutes; the job gets {plan.timeout_seconds}s to checkpoint ({plan.source} command)"
        )
    else:
        what = (
            "its interruptible capacity reservation is reclaimed"
            if notice.kind == "capacity-reservation"
            else f"Capacity Block {notice.reservation_id} ends"
        )
        first = (
            f"{what}: EC2 will {instance_action} {instance.type} {instance.id} from {notice.deadline.isoformat()} "
            f"({round(left)}s after the event); the job gets {plan.timeout_seconds}s to checkpoint "
            f"({plan.source} command)"
        )
    reasons = [first]
    reasons += plan.notes()
    reasons += [str(problem) for problem in instance.refused_tags]  # an exemption that held nothing back, said
    if policy.spot.replacement != "none" and blocker:
        reasons.append(f"no replacement: {blocker}")
    if not policy.spot.enforce:
        reasons.append("report-only (spot.enforce: false): nothing is sent or changed, the interruption is recorded")
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=instance.id,
        actions=actions,
        reasons=reasons,
        evidence={**base, **_evidence(instance, at, policy)},
        severity="warning",
        rule=notice.rule,
    )


def decide_rebalance(instance_id: str, instance: Instance | None, policy: Policy, at: dt.datetime) -> Decision:
    """A rebalance recommendation: checkpoint early (``on_rebalance: checkpoint``) or only record and notify."""
    why_not = _not_actionable(instance_id, instance, policy, at)
    if why_not or instance is None:
        return _ignored(instance_id, why_not or f"{instance_id} no longer exists", "spot-rebalance")
    who = ownership(instance.tags, policy.fleet)
    plan = checkpoint_plan(instance.tags, policy)
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=instance.id,
        actions=_rebalance_actions(policy, plan, who.owner, who.team),
        reasons=[_rebalance_reason(policy, f"{instance.type} {instance.id}"), *plan.notes()],
        evidence=_evidence(instance, at, policy),
        severity="warning" if plan.problem else "info",
        rule="spot-rebalance",
    )


def _rebalance_actions(policy: Policy, plan: CheckpointPlan, owner: str, team: str) -> list[AnyAction]:
    enforce = policy.spot.enforce
    actions: list[AnyAction] = []
    if policy.spot.on_rebalance == "checkpoint":
        actions.append(_checkpoint_action(policy, plan))
    actions.append(Record(enforced=enforce, kind="decision"))
    actions.append(Notify(enforced=enforce, owner=owner, team=team))
    return actions


def _rebalance_reason(policy: Policy, what: str) -> str:
    if policy.spot.on_rebalance == "checkpoint":
        return f"EC2 recommends rebalancing {what} (elevated interruption risk): checkpoint early (on_rebalance)"
    return f"EC2 recommends rebalancing {what} (elevated interruption risk): record and notify only (on_rebalance)"


def decide_state_change(instance_id: str, state: str, record: InterruptionRecord | None, policy: Policy) -> Decision:
    """A stop/termination completes the interruption record; an instance never warned about is ``ignored``."""
    if state not in FINAL_STATES:
        return _ignored(
            instance_id,
            f"state {state}: only stopped and terminated complete an interruption record",
            "spot-interruption-final",
        )
    if record is None:
        return _ignored(
            instance_id,
            f"{instance_id} {state}, but the governor never saw an interruption warning for it",
            "spot-interruption-final",
        )
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=instance_id,
        actions=[Record(enforced=policy.spot.enforce, kind=RECORD_KIND, status=state)],
        reasons=[f"{instance_id} {state} after the interruption warning of {record.warned_at.isoformat()}"],
        evidence={"warned_event": record.event_id, "command_id": record.command_id},
        rule="spot-interruption-final",
    )


def decide_command_status(
    instance_id: str, command_id: str, status: str, record: InterruptionRecord | None, policy: Policy
) -> Decision:
    """The checkpoint command finished: complete the record and release a held Auto Scaling lifecycle action."""
    if record is None or record.command_id != command_id:
        return _ignored(
            instance_id,
            f"command {command_id} is not a checkpoint the governor sent for an interruption",
            "spot-checkpoint-status",
        )
    if status not in FINAL_COMMAND_STATUSES:
        return Decision(
            policy=POLICY,
            verdict="ok",
            resource=instance_id,
            reasons=[f"checkpoint command {command_id} is {status}; waiting for its final status"],
            rule="spot-checkpoint-status",
        )
    actions: list[AnyAction] = [Record(enforced=policy.spot.enforce, kind=RECORD_KIND, checkpoint_status=status)]
    if record.auto_scaling_group and policy.spot.complete_lifecycle_action and record.lifecycle_action == "pending":
        actions.insert(
            0,
            CompleteLifecycleAction(
                enforced=policy.spot.enforce,
                auto_scaling_group=record.auto_scaling_group,
            ),
        )
    return Decision(
        policy=POLICY,
        verdict="act",
        resource=instance_id,
        actions=actions,
        reasons=[f"checkpoint command {command_id} finished: {status}"],
        evidence={"command_id": command_id, "status": status},
        severity="info" if status == "Success" else "warning",
        rule="spot-checkpoint-status",
    )


def start_record(
    decision: Decision,
    instance: Instance,
    event_id: str,
    at: dt.datetime,
    instance_action: str,
    interruption: str | None = None,
) -> InterruptionRecord:
    """The interruption record for an acted-on warning, before any outcome is known."""
    checkpoint = next(a for a in decision.actions if isinstance(a, Checkpoint))
    evidence = decision.evidence
    return InterruptionRecord(
        instance_id=instance.id,
        event_id=event_id,
        warned_at=at,
        instance_action=instance_action,
        instance_type=instance.type,
        zone=instance.zone,
        lifecycle=instance.lifecycle,
        launched_at=instance.launch_time,
        age_seconds=_age_seconds(instance, at),
        owner=str(evidence.get("owner")),
        team=str(evidence.get("team")),
        enforced=checkpoint.enforced,
        checkpoint_command=str(checkpoint.command),
        checkpoint_source=str(checkpoint.source),
        auto_scaling_group=instance.tags.get(ASG_TAG),
        interruption=interruption,
    )
