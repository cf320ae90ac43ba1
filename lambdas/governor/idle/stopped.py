"""Stopped, still billing (issue 49, item 2): a stopped GPU instance bills no compute, but its EBS volumes and public
IPv4 addresses bill every hour; our own idle stops create such machines. Pure: the sweep hands in what it read (the
stopped instance, its volumes and addresses) and records the decision this returns, one per instance and sweep.

With ``idle.stopped.snapshot_and_terminate_after_days`` an instance stopped at least that long is due to have its
volumes snapshotted (tags copied) and to be terminated; until then its owner is told when. Once due, each sweep
takes the next step (report-only until ``idle.enforce``): snapshot every volume, wait until every snapshot
completed, then terminate; the snapshot ids are kept in the ledger and the decision says how to restore.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from governor.domain.actions import Action, Notify
from governor.domain.decision import Decision
from governor.domain.fleet import Instance, Ownership
from governor.domain.storage import (
    EBS_PRICE_SOURCE,
    HOURS_PER_MONTH,
    PUBLIC_IPV4_SOURCE,
    Volume,
    ipv4_month,
    stopped_since,
    volume_evidence,
    volume_month,
)
from governor.idle.actions import Terminate
from governor.idle.domain import POLICY
from governor.idle.policy import StoppedPolicy
from governor.idle.teardown_actions import SnapshotVolumes

#: Rule (``idle.stopped-billing``) and ``evidence.status`` of the decision about one stopped instance.
STOPPED_BILLING = "stopped-billing"


@dataclass(frozen=True)
class Snapshots:
    """What the ledger and EC2 say of the snapshots taken of one stopped instance: volume id -> snapshot id, as
    recorded when they were taken, and snapshot id -> state, as DescribeSnapshots reads it now."""

    taken: Mapping[str, str]
    states: Mapping[str, str]


def _due(policy: StoppedPolicy, since: dt.datetime | None, now: dt.datetime) -> tuple[dict[str, Any] | None, str]:
    days = policy.snapshot_and_terminate_after_days
    if days is None:
        return None, ""
    if since is None:
        said = f"idle.stopped.snapshot_and_terminate_after_days is {days}, but EC2 gave no stop time: not due"
        return {"after_days": days, "due_at": None, "due": False, "enforced": False}, said
    due_at = since + dt.timedelta(days=days)
    if now < due_at:
        said = (
            f"will be due for snapshot and terminate at {due_at:%Y-%m-%d %H:%M} UTC "
            f"(idle.stopped.snapshot_and_terminate_after_days = {days}); start it or tag it governor:exempt=true to "
            "keep it"
        )
        return {"after_days": days, "due_at": due_at.isoformat(), "due": False, "enforced": False}, said
    said = f"due for snapshot and terminate since {due_at:%Y-%m-%d %H:%M} UTC (stopped {days}+ days)"
    return {"after_days": days, "due_at": due_at.isoformat(), "due": True, "enforced": False}, said


def restore_hint(taken: Mapping[str, str], zone: str | None) -> str:
    """How to get the data back after the terminate (``governor explain`` and the ledger print it)."""
    where = zone or "<zone>"
    volumes = "; ".join(
        f"{volume}: aws ec2 create-volume --snapshot-id {snap} --availability-zone {where}"
        for volume, snap in sorted(taken.items())
    )
    return (
        f"restore: {volumes}; then attach each to a new instance (or aws ec2 register-image from the root volume's "
        "snapshot and launch it)"
    )


def _teardown_acts(
    instance: Instance, volumes: Sequence[Volume], snapshots: Snapshots | None, enforce: bool
) -> tuple[list[Action], str, dict[str, Any]]:
    """A due instance's next step: snapshot every volume, wait for the snapshots, or terminate once every one
    completed; report-only unless ``enforce``."""
    current = [v.id for v in volumes]
    taken = dict(snapshots.taken) if snapshots else {}
    states = dict(snapshots.states) if snapshots else {}
    seen: dict[str, Any] = {"snapshots": taken, "snapshot_states": states}
    mode = "" if enforce else " (report-only)"
    if not taken or any(v not in taken for v in current):
        said = f"snapshotting every volume with its tags{mode}, then terminate once every snapshot completed"
        act = SnapshotVolumes(enforced=enforce, volume_ids=current, reason=STOPPED_BILLING)
        return [act], ("would snapshot every volume with its tags, then terminate" if not enforce else said), seen
    pending = [f"{taken[v]} {states.get(taken[v], 'missing')}" for v in current if states.get(taken[v]) != "completed"]
    if pending:
        return [], f"waiting for every snapshot to complete before the terminate: {', '.join(pending)}", seen
    said = f"every snapshot completed: terminating{mode}; {restore_hint(taken, instance.zone)}"
    return [Terminate(enforced=enforce)], said, seen


def stopped_decision(
    instance: Instance,
    volumes: Sequence[Volume],
    public_ips: Sequence[str],
    who: Ownership,
    policy: StoppedPolicy,
    now: dt.datetime,
    enforce: bool = False,
    snapshots: Snapshots | None = None,
) -> tuple[Decision, str]:
    """The report-only decision about one stopped GPU instance: what its volumes and public IPv4 addresses cost a
    month (and a day), whose it is, how long it has been stopped, and what to do."""
    since = stopped_since(instance.state_reason)
    priced = [volume_month(v) for v in volumes]
    storage = round(sum(p for p in priced if p is not None), 2)
    addresses = ipv4_month(len(public_ips))
    per_month = round(storage + addresses, 2)
    per_day = round(per_month / HOURS_PER_MONTH * 24, 2)
    unpriced = [v.id for v, p in zip(volumes, priced, strict=True) if p is None]
    parts = [f"{v.id} {v.type} {v.size_gib} GiB" + (f" {v.iops} IOPS" if v.iops else "") for v in volumes]
    how_long = f" since {since:%Y-%m-%d %H:%M} UTC ({(now - since).days} days)" if since else ""
    reasons = [
        f"stopped{how_long}, still billing ${per_month:,.2f} a month (${per_day:,.2f} a day): "
        f"{len(volumes)} EBS volume(s) ${storage:,.2f} ({'; '.join(parts) or 'none'})"
        + (f", {len(public_ips)} public IPv4 ${addresses:,.2f} ({', '.join(public_ips)})" if public_ips else "")
        + (f"; not priced: {', '.join(unpriced)}" if unpriced else ""),
        "to stop paying: terminate it if nobody needs it (snapshot the volumes first to keep the data: aws ec2 "
        f"create-snapshots --instance-specification InstanceId={instance.id} --copy-tags-from-source volume), and "
        "release its Elastic IPs",
    ]
    teardown, said = _due(policy, since, now)
    acts: list[Action] = []
    if teardown is not None and teardown["due"]:
        acts, step, seen = _teardown_acts(instance, volumes, snapshots, enforce)
        teardown |= {**seen, "enforced": enforce and bool(acts)}
        said = f"{said}: {step}"
    if said:
        reasons.append(said)
    decision = Decision(
        policy=POLICY,
        verdict="act",
        resource=instance.id,
        actions=[Notify(enforced=False, owner=who.owner, team=who.team, reason=STOPPED_BILLING), *acts],
        reasons=reasons,
        evidence={
            "status": STOPPED_BILLING,
            "instance_type": instance.type,
            "stopped_since": since.isoformat() if since else None,
            "volumes": [volume_evidence(v) for v in volumes],
            "public_ips": list(public_ips),
            "volumes_usd_month": storage,
            "ipv4_usd_month": addresses,
            "usd_month": per_month,
            "usd_per_day": per_day,
            "price_source": f"{EBS_PRICE_SOURCE}; {PUBLIC_IPV4_SOURCE}",
            "owner": who.owner,
            "team": who.team,
            "snapshot_and_terminate": teardown,
            "judged_at": now.isoformat(),
        },
        severity="warning",
        rule=f"idle.{STOPPED_BILLING}",
    )
    title = (
        f"Stopped GPU instance {instance.id} ({instance.type}) still bills ${per_month:,.2f} a month "
        f"({len(volumes)} volume(s), {len(public_ips)} public IPv4)"
    )
    return decision, title


def preview_stopped(
    instance: Instance, who: Ownership, policy: StoppedPolicy, now: dt.datetime, enforce: bool
) -> Decision:
    """``governor explain --instances`` on a stopped instance: the sweep's decision, assuming what
    ``describe-instances`` does not say (the volumes' types and sizes: unpriced; the snapshots: taken and completed,
    their ids in the ledger's ``stopped-snapshots`` item): when it is due, and how to restore after the terminate."""
    volumes = [Volume(id=v, type="unknown", size_gib=0) for v in instance.volume_ids]
    placeholder = {v: f"<snapshot of {v}: ledger item stopped-snapshots#{instance.id}>" for v in instance.volume_ids}
    snapshots = Snapshots(placeholder, dict.fromkeys(placeholder.values(), "completed"))
    decision, _ = stopped_decision(instance, volumes, [], who, policy, now, enforce, snapshots)
    assumed = [
        "assumed: its volumes' types and sizes, and its public IPv4 addresses, are not in describe-instances: unpriced "
        "here (the sweep reads them with DescribeVolumes and DescribeAddresses)",
        "assumed: once due, every volume was snapshotted and every snapshot completed (their ids are in the ledger)",
    ]
    return decision.model_copy(update={"assumptions": assumed})
