"""What a stopped instance still bills: its EBS volumes and its public IPv4 addresses.

A stopped instance bills no compute, but every EBS volume attached to it keeps billing its provisioned size (and, for
gp3, io1 and io2, its provisioned IOPS and throughput), and every public IPv4 address still associated with it (an
Elastic IP: an auto-assigned one is released at the stop) bills by the hour. Prices are AWS's list prices in
us-east-1 (``EBS_PRICES``, ``PUBLIC_IPV4_PER_HOUR``), monthly at AWS's 730 hours a month.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

#: Hours in AWS's billing month (the price pages' monthly figures divide by this).
HOURS_PER_MONTH = 730.0

#: Where the EBS prices below come from, and when they were read.
EBS_PRICE_SOURCE = "Amazon EBS pricing, us-east-1 (https://aws.amazon.com/ebs/pricing/, read 2026-12-06)"
#: USD per GB-month of provisioned storage, per volume type.
EBS_PRICES: dict[str, float] = {
    "gp3": 0.08,
    "gp2": 0.10,
    "io1": 0.125,
    "io2": 0.125,
    "st1": 0.045,
    "sc1": 0.015,
    "standard": 0.05,
}
#: gp3: IOPS and throughput above the free baseline (3,000 IOPS, 125 MiB/s) billed per provisioned unit-month.
GP3_FREE_IOPS = 3000
GP3_IOPS_MONTH = 0.005
GP3_FREE_THROUGHPUT = 125
GP3_THROUGHPUT_MONTH = 0.04
#: io1: every provisioned IOPS; io2: tiered by the volume's provisioned IOPS (up to 32,000; 32,001-64,000; above).
IO1_IOPS_MONTH = 0.065
IO2_IOPS_TIERS: tuple[tuple[int, float], ...] = ((32000, 0.065), (64000, 0.0455), (10**9, 0.03185))

#: Every public IPv4 address, in use or idle, since 2024-02-01 (https://aws.amazon.com/vpc/pricing/, read 2026-12-06).
PUBLIC_IPV4_PER_HOUR = 0.005
PUBLIC_IPV4_SOURCE = "Amazon VPC pricing, public IPv4 address $0.005/h (https://aws.amazon.com/vpc/pricing/)"


@dataclass(frozen=True)
class Volume:
    """One EBS volume as DescribeVolumes reports it (the fields its price and its snapshot need)."""

    id: str
    type: str
    size_gib: int
    iops: int | None = None
    throughput: int | None = None
    tags: dict[str, str] = field(default_factory=dict)
    device: str | None = None


def _io2_iops(iops: int) -> float:
    cost, below = 0.0, 0
    for ceiling, rate in IO2_IOPS_TIERS:
        cost += max(min(iops, ceiling) - below, 0) * rate
        below = ceiling
    return cost


def volume_month(volume: Volume) -> float | None:
    """USD a month the volume bills while it exists (its instance stopped or not); None for a type not priced."""
    per_gb = EBS_PRICES.get(volume.type)
    if per_gb is None:
        return None
    cost = per_gb * volume.size_gib
    iops = volume.iops or 0
    if volume.type == "gp3":
        cost += max(iops - GP3_FREE_IOPS, 0) * GP3_IOPS_MONTH
        cost += max((volume.throughput or 0) - GP3_FREE_THROUGHPUT, 0) * GP3_THROUGHPUT_MONTH
    elif volume.type == "io1":
        cost += iops * IO1_IOPS_MONTH
    elif volume.type == "io2":
        cost += _io2_iops(iops)
    return round(cost, 2)


def ipv4_month(addresses: int) -> float:
    return round(addresses * PUBLIC_IPV4_PER_HOUR * HOURS_PER_MONTH, 2)


def volume_evidence(volume: Volume) -> dict[str, Any]:
    return {
        "volume_id": volume.id,
        "type": volume.type,
        "size_gib": volume.size_gib,
        "iops": volume.iops,
        "throughput": volume.throughput,
        "device": volume.device,
        "usd_month": volume_month(volume),
    }


_STOPPED_AT = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


def stopped_since(state_reason: str | None) -> dt.datetime | None:
    """When the instance stopped, from EC2's ``StateTransitionReason`` (``User initiated (2026-11-02 12:00:00
    GMT)``); None when EC2 gave no time."""
    found = _STOPPED_AT.search(state_reason or "")
    if found is None:
        return None
    return dt.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)
