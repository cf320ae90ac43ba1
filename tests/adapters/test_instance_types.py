"""GPU facts from EC2's DescribeInstanceTypes on moto (its recorded instance types carry GpuInfo with
LogicalGpuCount and GpuPartitionSize, NeuronInfo for Trainium), cached per container, with the shipped table answering
for what EC2 does not list or when the call fails."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from governor.adapters.instance_types import GpuTypes, learn_types
from governor.domain import gpus
from governor.policy import Policy
from governor.registry import REGISTRY


@pytest.fixture(autouse=True)
def _fresh_container() -> Iterator[None]:
    gpus.forget()
    yield
    gpus.forget()


class Counting:
    """An EC2 client that counts DescribeInstanceTypes pages."""

    def __init__(self, ec2: Any) -> None:
        self._ec2 = ec2
        self.pages = 0

    def get_paginator(self, name: str) -> Any:
        paginator = self._ec2.get_paginator(name)
        outer = self

        class Counted:
            def paginate(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
                for page in paginator.paginate(**kwargs):
                    outer.pages += 1
                    yield page

        return Counted()


class Denied:
    def get_paginator(self, name: str) -> Any:
        error = {"Error": {"Code": "UnauthorizedOperation", "Message": "not allowed"}}
        raise ClientError(error, "DescribeInstanceTypes")


def test_describe_instance_types_gives_fractional_and_newest_gpus_and_is_read_once() -> None:
    with mock_aws():
        ec2 = Counting(boto3.client("ec2", "us-east-1"))
        wanted = ["g6f.large", "g6f.4xlarge", "p6-b200.48xlarge", "trn2.48xlarge", "m5.large", "p6e-gb200.36xlarge"]
        assert learn_types(wanted, ec2=ec2) is None
        read = ec2.pages
        g6f = gpus.facts_of("g6f.large")
        assert g6f is not None and g6f.source == gpus.API_SOURCE
        assert (g6f.model, g6f.count, g6f.devices, g6f.memory_mib, g6f.fractional) == (
            "NVIDIA L4",
            0.125,
            1,
            2861,
            True,
        )
        assert gpus.gpu_count("g6f.4xlarge") == 0.5
        b200 = gpus.facts_of("p6-b200.48xlarge")
        assert b200 is not None and (b200.model, b200.count, b200.kind) == ("NVIDIA B200", 8, "gpu")
        trn2 = gpus.facts_of("trn2.48xlarge")
        assert trn2 is not None and (trn2.kind, trn2.model, trn2.count) == ("neuron", "AWS Trainium2", 16)
        assert gpus.facts_of("m5.large") is None  # EC2 listed it, with no accelerator
        # moto's recording predates p6e-gb200: the shipped table answers for it.
        gb200 = gpus.facts_of("p6e-gb200.36xlarge")
        assert gb200 is not None and gb200.source == gpus.SHIPPED_SOURCE and gb200.count == 4
        assert learn_types(wanted, ec2=ec2) is None and ec2.pages == read  # cached for the container's life


def test_a_failed_call_falls_back_to_the_shipped_table_and_says_why() -> None:
    said = GpuTypes("us-east-1", Denied())(["g6f.xlarge", "p6-b300.48xlarge"])
    assert said is not None and "UnauthorizedOperation" in said and "shipped GPU table" in said
    g6f = gpus.facts_of("g6f.xlarge")
    assert g6f is not None and g6f.source == gpus.SHIPPED_SOURCE and g6f.label() == "1/8 of an NVIDIA L4, 2.8 GiB"
    assert gpus.label("p6-b300.48xlarge") == "8 x NVIDIA B300, 268.6 GiB each"


def test_the_shipped_table_agrees_with_describe_instance_types_for_every_type_both_know() -> None:
    with mock_aws():
        ec2 = boto3.client("ec2", "us-east-1")
        assert learn_types(gpus.SHIPPED, ec2=ec2) is None
        differ = {
            t: (shipped, gpus.facts_of(t))
            for t, shipped in gpus.SHIPPED.items()
            if t in gpus.learned()
            and (found := gpus.facts_of(t)) is not None
            and (found.model, found.count, found.kind, found.memory_mib)
            != (shipped.model, shipped.count, shipped.kind, shipped.memory_mib)
        }
        assert differ == {}
        assert len(gpus.learned()) > 50


def test_the_idle_and_report_functions_may_call_describe_instance_types() -> None:
    policy = Policy()
    for name in ("idle", "report"):
        assert "ec2:DescribeInstanceTypes" in REGISTRY[name].permissions(policy)
