"""The ``network`` function: security-group and public-address calls from CloudTrail, in seconds, plus a daily sweep.

Every decision is recorded before anything changes; each offending rule is re-read and revoked by its own id, so
compliant rules from the same call stay; the finding says exactly what was done.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from governor import runner
from governor.adapters.aws import per_session
from governor.adapters.ec2 import Ec2Reader
from governor.domain.actions import Outcome
from governor.domain.decision import Action, Decision, Finding
from governor.domain.fleet import Instance, ownership
from governor.domain.tagging import bounded_instance
from governor.events.envelopes import (
    CLOUDTRAIL_DETAIL_TYPE,
    CloudTrailEvent,
    GovernorEvent,
    InvalidEventError,
    parse_model,
)
from governor.network.actions import RevokeIngress
from governor.network.addresses import PublicAddresses
from governor.network.domain import (
    decide_call,
    decide_group,
    decide_group_call,
    decide_public_ip,
    limit_revocations,
    revocations,
    scoped_out,
)
from governor.network.events import (
    EVENT_NAMES,
    SECURITY_GROUP_EVENTS,
    NetworkCall,
    PublicAddress,
    parse_call,
    public_address,
)
from governor.network.rules import fleet_group_ids, not_the_fleets, out_of_scope
from governor.network.security_groups import GroupState, SecurityGroups
from governor.observability import logger, metrics
from governor.outbox import Outbox
from governor.runtime import Handler, Invocation, Runtime, default_runtime

SCHEDULED = "Scheduled Event"
POLICY = "network"
Judged = tuple[Decision, dict[str, str]]  # a decision and the resource's tags (for the finding's owner and team)
SCHEDULE_SOURCE = "aws.scheduler"


@dataclass
class Adapters:
    """The AWS reads and writes this function uses; tests pass the same classes pointed at moto."""

    groups: SecurityGroups
    addresses: PublicAddresses
    instances: Ec2Reader


@per_session
def _aws(region: str | None) -> Adapters:
    return Adapters(SecurityGroups(region), PublicAddresses(region), Ec2Reader(region))


def parse(raw: Any) -> CloudTrailEvent | GovernorEvent:
    """A CloudTrail call of one of the six EC2 APIs, or the sweep's Scheduled Event; anything else is rejected."""
    if isinstance(raw, dict) and raw.get("detail-type") == SCHEDULED:
        event = parse_model(GovernorEvent, raw)
        if event.source != SCHEDULE_SOURCE:
            raise InvalidEventError(f"scheduled event from {event.source!r}, expected {SCHEDULE_SOURCE}", event.id)
        return event
    event_ = parse_model(CloudTrailEvent, raw)
    if event_.detail_type != CLOUDTRAIL_DETAIL_TYPE or event_.source != "aws.ec2":
        raise InvalidEventError(
            f"unsupported event {event_.source}/{event_.detail_type!r}: the network function takes EC2 CloudTrail "
            "calls and its schedule",
            event_.id,
        )
    if event_.detail.event_name not in EVENT_NAMES:
        raise InvalidEventError(
            f"unsupported EC2 call {event_.detail.event_name!r}; expected one of {', '.join(EVENT_NAMES)}", event_.id
        )
    return event_


# --- deciding with live state -----------------------------------------------------------------------------------------


def bounded(instance: Instance, runtime: Runtime, now: dt.datetime) -> Instance:
    """``exempt=true`` read as its end (``governor.domain.tagging``): no exemption lasts for ever."""
    return bounded_instance(instance, runtime.policy.fleet, runtime.ledger, now)


def ownership_proofs(group_ids: Sequence[str], aws: Adapters, runtime: Runtime) -> dict[str, str | None]:
    """For each group, why nothing proves it is the fleet's (None: every interface using it is a GPU instance's).

    Two reads whatever the number of groups: the interfaces using them, and the instances those interfaces belong
    to. Under ``network.scope: all`` the policy's author chose to judge every group, and nothing is asked.
    """
    if runtime.policy.network.scope == "all" or not group_ids:
        return dict.fromkeys(group_ids)
    attached = aws.groups.attachments(list(group_ids))
    ids = sorted({a.instance_id for found in attached.values() for a in found if a.instance_id})
    fleet = runtime.policy.fleet
    gpu = {i.id for i in aws.instances.instances(ids) if fleet.is_gpu_type(i.type)} if ids else set()
    return {group: not_the_fleets(group, attached.get(group, []), gpu) for group in group_ids}


def _proven(decision: Decision, judge: Callable[[str | None], Decision], aws: Adapters, runtime: Runtime) -> Decision:
    """The decision again with the group's ownership proof, read only when it would revoke something."""
    if not revocations(decision):
        return decision
    shared = ownership_proofs([decision.resource], aws, runtime)[decision.resource]
    return decision if shared is None else judge(shared)


def opened_by(judged: Judged, caller: str | None) -> Judged:
    """The decision with who made the call (CloudTrail's ``userIdentity.arn``) in its evidence: a group with no owner
    tag is owned, in its finding and the report, by whoever opened the rule (issue 48: "Owner unknown" while
    ``governor audit`` on the same trail named who opened port 22)."""
    decision, tags = judged
    if not caller:
        return judged
    return decision.model_copy(update={"evidence": {**decision.evidence, "opened_by": caller}}), tags


def _group_decision(call: NetworkCall, aws: Adapters, runtime: Runtime) -> Judged:
    """Judge the rules this call added or changed, as they are now (re-read), never the event's copy alone."""
    live = aws.groups.group(call.group_id, None if call.group_id else call.group_name)
    fleet_groups: set[str] = set()
    if live is not None and runtime.policy.network.scope != "all":
        gpus = aws.instances.gpu_instances(runtime.policy.fleet, states=("pending", "running"))
        fleet_groups = fleet_group_ids(gpus, runtime.policy)
    decision = decide_group_call(call, live, fleet_groups, runtime.policy)
    if live is None:
        return decision, {}

    def judge(shared: str | None) -> Decision:
        return decide_group_call(call, live, fleet_groups, runtime.policy, shared=shared)

    return _proven(decision, judge, aws, runtime), live.tags


def _launch_group_decisions(instances: Sequence[Instance], aws: Adapters, runtime: Runtime) -> list[Judged]:
    """A GPU launch puts its security groups in scope: each is judged now, not only at the next drift sweep (a group
    opened to the world before the launch was, until then, nobody's proven group)."""
    judged: list[Judged] = []
    for group_id in sorted(
        {g for i in instances if runtime.policy.fleet.is_gpu_type(i.type) for g in i.security_groups}
    ):
        live = aws.groups.group(group_id)
        if live is None:
            continue

        def judge(shared: str | None, live: GroupState = live) -> Decision:
            policy = runtime.policy
            return decide_group(live.group_id, live.rules, policy, tags=live.tags, group_name=live.name, shared=shared)

        judged.append((_proven(judge(None), judge, aws, runtime), live.tags))
    return judged


def _instance_decision(instance: Instance, aws: Adapters, runtime: Runtime, now: dt.datetime) -> Judged:
    instance = bounded(instance, runtime, now)
    elastic = aws.addresses.elastic([instance.public_ip]) if instance.public_ip else {}
    address = public_address(instance, elastic)
    return decide_public_ip(instance.id, instance.type, instance.tags, address, runtime.policy, now), instance.tags


def _launch(call: NetworkCall, runtime: Runtime, now: dt.datetime) -> tuple[list[str], list[Judged]]:
    """The instances a launch started that may be GPU (to re-read), and a decision on each the event shows is not:
    those need no read."""
    fleet = runtime.policy.fleet
    ids = [i.id for i in call.instances if i.id and (not i.type or fleet.is_gpu_type(i.type))]
    decisions = [
        (decide_public_ip(i.id, i.type, i.tags, None, runtime.policy, now), i.tags)
        for i in call.instances
        if i.id and i.type and not fleet.is_gpu_type(i.type)
    ]
    return ids, decisions


def _gone(resource: str, reason: str) -> Judged:
    return Decision(policy="network", verdict="ignored", resource=resource, reasons=[reason]), {}


def _address_decisions(
    call: NetworkCall, aws: Adapters, runtime: Runtime, now: dt.datetime, launched_out: list[Instance] | None = None
) -> list[Judged]:
    if call.name == "ModifyNetworkInterfaceAttribute" and not call.associate_public_ip:
        return [(decision, {}) for decision in decide_call(call, runtime.policy, now)]
    decisions: list[Judged] = []
    if call.name == "RunInstances":
        ids, decisions = _launch(call, runtime, now)
    else:
        instance_id = call.instance_id
        if instance_id is None and call.network_interface_id:
            instance_id = aws.addresses.instance_of_interface(call.network_interface_id)
        if instance_id is None:
            target = call.network_interface_id or "unknown"
            return [_gone(target, f"{target} is not attached to an instance; no GPU instance gained an address")]
        ids = [instance_id]
    found = {instance.id: instance for instance in aws.instances.instances(ids)} if ids else {}
    if launched_out is not None and call.name == "RunInstances":
        launched_out.extend(found.values())
    for instance_id in ids:
        instance = found.get(instance_id)
        if instance is None:
            decisions.append(_gone(instance_id, f"{instance_id} no longer exists"))
        else:
            decisions.append(_instance_decision(instance, aws, runtime, now))
    return decisions


def _reread(decision: Decision, aws: Adapters, runtime: Runtime) -> Decision:
    """Judge a group again from a fresh read right before revoking: a rule fixed, replaced or protected since the sweep
    listed it is not revoked, and never more revocations than the listing allowed (the budget was spent on those)."""
    live = aws.groups.group(decision.resource)
    if live is None:
        return scoped_out(decision.resource, f"{decision.resource} no longer exists; nothing to revoke")
    planned = {
        rule_id
        for action in decision.enforced_actions()
        if isinstance(action, RevokeIngress)
        for rule_id in action.rule_ids
    }
    shared = ownership_proofs([live.group_id], aws, runtime)[live.group_id]  # re-read, as the rules are
    fresh = decide_group(live.group_id, live.rules, runtime.policy, tags=live.tags, group_name=live.name, shared=shared)
    kept = []
    for action in fresh.actions:
        if isinstance(action, RevokeIngress) and action.enforced and not set(action.rule_ids) <= planned:
            action = action.model_copy(update={"enforced": False})  # new since the listing: the next sweep judges it
        kept.append(action)
    return fresh.model_copy(update={"actions": kept, "reasons": [*fresh.reasons, "re-read right before revoking"]})


# --- acting (through the generic runner) ------------------------------------------------------------------------------


def _title(decision: Decision) -> str:
    if decision.verdict == "ignored":
        return f"Protected security group {decision.resource} breaks the network policy (not changed)"
    if decision.rule == "network.public-ip":
        return f"GPU instance {decision.resource} has a public IPv4 address"
    count = sum(1 for action in decision.actions if action.type == "revoke_ingress")
    return f"Security group {decision.resource}: {count} ingress rule(s) break the network policy"


def settle(
    decision: Decision,
    *,
    event_id: str,
    runtime: Runtime,
    aws: Adapters,
    outbox: Outbox,
    tags: dict[str, str] | None = None,
    account: str | None = None,
) -> dict[str, Any]:
    """The runner's act path with network's finding: it names the owner from the resource's tags and says what was
    revoked or removed (or that nothing changed)."""

    def findings(decided: Decision, results: Sequence[tuple[Action, Outcome]] | None) -> list[Finding]:
        violating = decided.verdict == "act" or (decided.verdict == "ignored" and decided.severity != "info")
        if not violating:
            return []
        who = ownership(tags or {}, runtime.policy.fleet)
        caller = decided.evidence.get("opened_by") if who.source == "unknown" else None
        finding = Finding.from_decision(
            decided,
            _title(decided),
            event_id=event_id,
            region=runtime.region,
            account=account,
            owner=str(caller) if caller else who.owner,  # no owner tag: who made the change (CloudTrail's caller)
            team=who.team,
        )
        done = [outcome.done for _, outcome in results or () if outcome.done]
        if done:
            return [finding.model_copy(update={"detail": finding.detail + "; done: " + "; ".join(done)})]
        if decided.enforced_actions() and results is not None:
            return [finding.model_copy(update={"detail": finding.detail + "; done: nothing changed"})]
        return [finding]

    settled = runner.Run(event_id, runtime.ledger, runtime.policy, aws, outbox).settle(decision, findings=findings)
    if settled.findings:
        metrics.add_metric(name="NetworkViolations", unit="Count", value=1)
    return settled.summary()


# --- the two entry points ---------------------------------------------------------------------------------------------


def on_call(event: CloudTrailEvent, runtime: Runtime, aws: Adapters) -> dict[str, Any]:
    """One CloudTrail call: decide on live state (after re-reading), record, act, report."""
    record = event.detail
    call = parse_call(record)
    now = event.time
    decisions: list[Judged]
    if call.failed:
        decisions = [(decision, {}) for decision in decide_call(call, runtime.policy, now)]
    elif call.name in SECURITY_GROUP_EVENTS:
        decisions = [opened_by(_group_decision(call, aws, runtime), record.user_identity.arn)]
    else:
        launched: list[Instance] = []
        decisions = _address_decisions(call, aws, runtime, now, launched)
        decisions += _launch_group_decisions(launched, aws, runtime)
    box = Outbox(runtime.ledger, runtime.sink, event_id=event.id)
    box.resume()  # what an earlier attempt of this event staged and never got accepted
    try:
        results = [
            settle(d, event_id=event.id, runtime=runtime, aws=aws, tags=tags, account=event.account, outbox=box)
            for d, tags in decisions
        ]
    except Exception:
        box.flush(raise_on_failure=False)
        raise
    box.flush()
    return {"status": "done", "event_id": event.id, "call": call.name, "decisions": results}


class SweepIncompleteError(RuntimeError):
    """Some actions of a sweep failed; raised after every resource was checked, so Lambda retries the sweep."""


@dataclass
class _Groups:
    """The sweep's judgement of every group: the decisions to settle (within the revocation budget) with each group's
    tags, how many groups were out of scope and how many revocations were deferred to the next sweep."""

    judged: list[Judged] = field(default_factory=list)
    outside: int = 0
    deferred: int = 0


def _sweep_groups(groups: list[GroupState], instances: list[Instance], aws: Adapters, runtime: Runtime) -> _Groups:
    """Every group in scope judged, the ones it would change proven the fleet's, within the revocation budget, and
    re-read right before revoking."""
    policy = runtime.policy
    fleet_groups = fleet_group_ids(instances, policy)
    found = _Groups()
    group_decisions: list[Decision] = []
    for group in sorted(groups, key=lambda g: g.group_id):
        why = out_of_scope(group.group_id, group.tags, fleet_groups, policy)
        if why:
            found.outside += 1
            group_decisions.append(scoped_out(group.group_id, why))
            continue
        group_decisions.append(
            decide_group(group.group_id, group.rules, policy, tags=group.tags, group_name=group.name)
        )
    # Only groups every interface of which is a GPU instance's may lose rules: the proofs of those the sweep would
    # change, in one batch before the budget is spent (and again, one group at a time, right before revoking).
    revoking = [d.resource for d in group_decisions if revocations(d)]
    proofs = ownership_proofs(revoking, aws, runtime)
    by_id = {g.group_id: g for g in groups}
    for index, decision in enumerate(group_decisions):
        shared = proofs.get(decision.resource)
        if shared is not None:
            group = by_id[decision.resource]
            group_decisions[index] = decide_group(
                group.group_id, group.rules, policy, tags=group.tags, group_name=group.name, shared=shared
            )
    limited, found.deferred = limit_revocations(group_decisions, policy.network.max_revocations_per_sweep)
    for decision in limited:
        if revocations(decision):
            decision = _reread(decision, aws, runtime)
        found.judged.append((decision, by_id[decision.resource].tags if decision.resource in by_id else {}))
    return found


def _sweep_addresses(instances: list[Instance], aws: Adapters, runtime: Runtime, now: dt.datetime) -> list[Judged]:
    """Every running GPU instance's public address, its Elastic IPs read in one call."""
    elastic = aws.addresses.elastic([i.public_ip for i in instances if i.public_ip])
    judged: list[Judged] = []
    for instance in (bounded(i, runtime, now) for i in instances):
        address: PublicAddress | None = public_address(instance, elastic)
        decision = decide_public_ip(instance.id, instance.type, instance.tags, address, runtime.policy, now)
        judged.append((decision, instance.tags))
    return judged


def _settle_each(
    judged: list[Judged], event: GovernorEvent, runtime: Runtime, aws: Adapters
) -> tuple[list[dict[str, Any]], list[str]]:
    """Settle every decision; one failing action does not stop the others (settle logged and reported it)."""
    results: list[dict[str, Any]] = []
    failed: list[str] = []
    box = Outbox(runtime.ledger, runtime.sink, event_id=event.id)
    box.resume()
    box.flush_stale(POLICY)  # findings earlier invocations left unsent
    for decision, tags in judged:
        try:
            results.append(
                settle(
                    decision, event_id=event.id, runtime=runtime, aws=aws, tags=tags, account=event.account, outbox=box
                )
            )
        except Exception as error:  # already logged and reported by settle; the other resources still get checked
            failed.append(f"{decision.resource}: {error}")
    box.flush(raise_on_failure=not failed)
    return results, failed


def sweep(event: GovernorEvent, runtime: Runtime, aws: Adapters) -> dict[str, Any]:
    """Re-check every security group and every running GPU instance in the region for drift the events missed.

    One failing action does not stop the sweep: every resource is still checked, then the failures are raised.
    """
    groups: list[GroupState] = aws.groups.all_groups()
    instances = aws.instances.gpu_instances(runtime.policy.fleet, states=("pending", "running"))
    swept = _sweep_groups(groups, instances, aws, runtime)
    judged = swept.judged + _sweep_addresses(instances, aws, runtime, event.time)
    deferred = swept.deferred
    if deferred:
        metrics.add_metric(name="NetworkRevocationsDeferred", unit="Count", value=deferred)
        logger.warning("network blast radius", extra={"deferred": deferred})
    results, failed = _settle_each(judged, event, runtime, aws)
    acted = [d for d, _ in judged if d.verdict == "act"]
    logger.info(
        "network sweep",
        extra={
            "groups": len(groups),
            "out_of_scope": swept.outside,
            "gpu_instances": len(instances),
            "violations": len(acted),
            "deferred": deferred,
            "failed": failed,
        },
    )
    if failed:
        raise SweepIncompleteError(f"{len(failed)} of {len(acted)} violations could not be fixed: " + "; ".join(failed))
    return {
        "status": "swept",
        "event_id": event.id,
        "groups": len(groups),
        "gpu_instances": len(instances),
        "violations": len(acted),
        "out_of_scope": swept.outside,
        "deferred": deferred,
        "done": [outcome for r in results for outcome in r["done"]],
    }


def process(
    parsed: CloudTrailEvent | GovernorEvent, runtime: Runtime, aws: Adapters, call: Invocation | None = None
) -> dict[str, Any]:
    if isinstance(parsed, CloudTrailEvent):
        return on_call(parsed, runtime, aws)
    return sweep(parsed, runtime, aws)


def handle(
    event: Any, runtime: Runtime, aws: Adapters | None = None, context: LambdaContext | None = None
) -> dict[str, Any]:
    """Parse at the edge (bad input goes to the DLQ with its reason), then decide, record and act once per event id."""
    return HANDLER.handle(event, runtime, aws, context=context)


def target_aws(event: dict[str, Any], runtime: Runtime) -> Adapters:
    """The sweep's adapters in a fan-out target's account and region (through the spoke role in a member account)."""
    from governor.adapters.aws import client, member_target

    member = member_target(event)
    if member is None:
        return _aws(runtime.region)
    account, event_region, event_id = member
    region = event_region or runtime.region
    ec2 = client("ec2", region, account=account, event_id=event_id)
    return Adapters(SecurityGroups(region, ec2), PublicAddresses(region, ec2), Ec2Reader(region, ec2))


#: EventBridge rules (six EC2 calls via CloudTrail) and the EventBridge Scheduler drift sweep both land here. In
#: organisation mode the schedule plans one drift sweep per account and region (``governor.fanout``); a CloudTrail
#: call forwarded from a member account is judged and acted on in that account (its spoke role).
HANDLER: Handler[CloudTrailEvent | GovernorEvent, Adapters] = Handler(
    __name__,
    parse=lambda raw, _: parse(raw),
    process=process,
    adapters=target_aws,
    sweep=POLICY,
    runtime=lambda: default_runtime(),  # looked up when called (tests replace it)
)
lambda_handler = HANDLER.lambda_handler()
