"""The AWS reads and writes the idle function uses, and its clock, as one value the handler builds (in its own
account, or through the spoke role in a member's) and tests build from the same classes pointed at moto, or fakes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.ssm import SsmCommands
from governor.adapters.volumes import InstanceStorage
from governor.domain.capacity import HyperPodReader, ReservationReader
from governor.domain.ports import utcnow
from governor.idle.autoscaling import AutoScalingGroups
from governor.idle.domain import MetricSource
from governor.idle.kubernetes.nodes import KubernetesNodes


def answer(response_url: str, message: dict[str, Any]) -> bool:
    """Update the Slack message behind a Stop now click (:func:`governor.adapters.slack_app.answer`, loaded only when
    there is a click to answer: a scheduled sweep never imports the Slack client)."""
    from governor.adapters.slack_app import answer as post

    return post(response_url, message)


@dataclass
class Adapters:
    """The AWS reads and writes the sweep uses, and its clock; tests pass the same classes pointed at moto, or fakes."""

    instances: Ec2Reader
    actions: Ec2Actions
    metrics: MetricSource
    commands: SsmCommands
    groups: AutoScalingGroups | None = None
    clock: Callable[[], dt.datetime] = field(default=utcnow)
    #: Capacity reservations (end dates, match criteria); None: the instances' own EC2 fields alone hold them.
    reservations: ReservationReader | None = None
    nodes: KubernetesNodes | None = None  # EKS nodes drained through their cluster's API (idle.clusters reclaim)
    #: SageMaker HyperPod clusters' node lists: their nodes are reported only, never stopped through EC2.
    hyperpod: HyperPodReader | None = None
    respond: Callable[[str, dict[str, Any]], bool] = answer
    #: Reads the GPU facts of the instance types the sweep sees (DescribeInstanceTypes, cached per container) and
    #: returns why it could not; None: the shipped GPU table answers (:mod:`governor.domain.gpus`).
    gpu_types: Callable[[Iterable[str]], str | None] | None = None
    #: Stopped instances' EBS volumes and public IPv4 addresses (what they still bill); None: not read.
    storage: InstanceStorage | None = None
