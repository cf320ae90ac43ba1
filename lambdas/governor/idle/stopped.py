"""Stopped, still billing (issue 49, item 2): a stopped GPU instance bills no compute, but its EBS volumes and public
IPv4 addresses bill every hour; our own idle stops create such machines. Pure: the sweep hands in what it read (the
stopped instance, its volumes and addresses) and records the decision this returns, one per instance and sweep.

With ``idle.stopped.snapshot_and_terminate_after_days`` an instance stopped at least that long is due to have its
volumes snapshotted (tags copied) and to be terminated; until then its owner is told when. Report-only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from governor.domain.actions import Notify
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
from governor.idle.domain import POLICY
from governor.idle.policy import StoppedPolicy

#: Rule (``idle.stopped-billing``) and ``evidence.status`` of the decision about one stopped instance.
STOPPED_BILLING = "stopped-billing"


def _teardown(
    policy: StoppedPolicy, since: dt.datetime | None, now: dt.datetime, enforce: bool
) -> tuple[dict[str, object] | None, str | None]:
    """When the instance is due to be snapshotted and terminated, and the sentence saying so (None when off)."""
    days = policy.snapshot_and_terminate_after_days
    if days is None:
        return None, None
    if since is None:
        return {"after_days": days, "due_at": None, "due": False}, (
            f"idle.stopped.snapshot_and_terminate_after_days is {days}, but EC2 gave no stop time: not due"
        )
    due_at = since + dt.timedelta(days=days)
    due = now >= due_at
    mode = "report-only" if not enforce else "report-only: the snapshot-and-terminate act is not built yet"
    if due:
        said = (
            f"due for snapshot and terminate since {due_at:%Y-%m-%d %H:%M} UTC (stopped {days}+ days): would "
            f"snapshot every volume with its tags, then terminate once every snapshot completed ({mode})"
        )
    else:
        said = (
            f"will be due for snapshot and terminate at {due_at:%Y-%m-%d %H:%M} UTC "
            f"(idle.stopped.snapshot_and_terminate_after_days = {days}; {mode}); start it or tag it "
            "governor:exempt=true to keep it"
        )
    return {"after_days": days, "due_at": due_at.isoformat(), "due": due, "enforced": False}, said


def stopped_decision(
    instance: Instance,
    volumes: Sequence[Volume],
    public_ips: Sequence[str],
    who: Ownership,
    policy: StoppedPolicy,
    now: dt.datetime,
    enforce: bool = False,
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
    teardown, said = _teardown(policy, since, now, enforce)
    if said:
        reasons.append(said)
    decision = Decision(
        policy=POLICY,
        verdict="act",
        resource=instance.id,
        actions=[Notify(enforced=False, owner=who.owner, team=who.team, reason=STOPPED_BILLING)],
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
