"""What accelerators the instance types a function sees carry: EC2's ``DescribeInstanceTypes``, once per type per
container, into :mod:`governor.domain.gpus`.

A type is asked for once, by the ``instance-type`` filter (100 values a call, paginated): with ``InstanceTypes``, one
type the region does not offer fails the whole call with ``InvalidInstanceType``, a filter just leaves it out. EC2's
answer replaces the shipped table's for that type for the container's life, so a family AWS launched after the table
was written is known the day it appears. A call that fails (denied, throttled) changes nothing:
:func:`governor.domain.gpus.facts_of` keeps answering from the shipped table, and the failure is returned for the
caller to log, never raised.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from governor.adapters.aws import client
from governor.domain import gpus

IAM_ACTIONS = frozenset({"ec2:DescribeInstanceTypes"})
#: How many types one request's filter names.
BATCH = 100


def learn_types(types: Iterable[str], region: str | None = None, ec2: Any = None) -> str | None:
    """Read the types this container has not read yet and teach :mod:`governor.domain.gpus` what they carry.

    Returns None when every type was read (or none was needed), else why the call failed (the shipped table
    answers for those types)."""
    wanted = sorted({t for t in types if t and "." in t} - gpus.learned())
    if not wanted:
        return None
    ec2 = ec2 or client("ec2", region)
    read: dict[str, gpus.GpuFacts | None] = {}
    try:
        for start in range(0, len(wanted), BATCH):
            paginator = ec2.get_paginator("describe_instance_types")
            batch = [{"Name": "instance-type", "Values": wanted[start : start + BATCH]}]
            for page in paginator.paginate(Filters=batch):
                for raw in page.get("InstanceTypes", []):
                    read[str(raw.get("InstanceType"))] = gpus.parse(raw)
    except (ClientError, BotoCoreError) as error:
        gpus.learn(read)
        return f"DescribeInstanceTypes failed ({type(error).__name__}: {error}); the shipped GPU table answers"
    # A type EC2 does not list keeps the shipped table's answer (moto's recording predates p6e-gb200); one neither
    # knows has no accelerator as far as the governor can tell.
    gpus.learn(read | {t: None for t in wanted if t not in read and gpus.facts_of(t) is None}, asked=wanted)
    return None


class GpuTypes:
    """:func:`learn_types` in one region, with one client made when first needed (the idle sweep's ``gpu_types``)."""

    def __init__(self, region: str | None = None, ec2: Any = None) -> None:
        self._region = region
        self._ec2 = ec2

    def __call__(self, types: Iterable[str]) -> str | None:
        wanted = set(types)
        if not wanted - gpus.learned():
            return None
        self._ec2 = self._ec2 or client("ec2", self._region)
        return learn_types(wanted, self._region, self._ec2)
