"""SageMaker HyperPod nodes in the idle sweep (issue 38): named by their cluster's own node list (ListClusters,
ListClusterNodes on moto), recorded as the purchase model with the cluster, reported only, never stopped through EC2,
with enforcement on. No instance tag decides it: a tag claiming a cluster changes nothing."""

from __future__ import annotations

import datetime as dt

import boto3
from moto import mock_aws

from governor.adapters.ec2 import Ec2Reader
from governor.adapters.hyperpod import HyperPodNodes
from governor.idle.handler import handle
from governor.report.handler import ledger_items
from governor_cli.demo.bootstrap import create_shared
from tests.adapters.test_capacity_idle import _runtime
from tests.adapters.test_idle_sweep import T0, _aws, _event, _launch, _metrics, _state


def _cluster(name: str) -> list[str]:
    sagemaker = boto3.client("sagemaker", region_name="us-east-1")
    sagemaker.create_cluster(
        ClusterName=name,
        InstanceGroups=[
            {
                "InstanceCount": 2,
                "InstanceGroupName": f"{name}-workers",  # moto names nodes <group>-<n>: unique per cluster
                "ThreadsPerCore": 1,
                "InstanceType": "ml.p5.48xlarge",
                "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/", "OnCreate": "on_create.sh"},
                "ExecutionRole": "arn:aws:iam::123456789012:role/hyperpod-execution",
            }
        ],
    )
    nodes = sagemaker.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]
    return [n["InstanceId"] for n in nodes]


class Nodes:
    """The adapter's answer with the cluster's node ids mapped onto moto's EC2 instances (moto's SageMaker invents
    its own instance ids, which its EC2 does not know); the mapping is read through the real adapter first."""

    def __init__(self, real: HyperPodNodes, ec2_ids: list[str]) -> None:
        self.real, self.ec2_ids = real, ec2_ids

    def nodes(self) -> dict[str, str]:
        found = self.real.nodes()
        return dict(zip(self.ec2_ids, found.values(), strict=False))


def test_the_adapter_reads_every_node_of_every_cluster() -> None:
    with mock_aws():
        first, second = _cluster("llm-pretrain"), _cluster("vision")
        reader = HyperPodNodes("us-east-1")
        found = reader.nodes()
        assert found == {**dict.fromkeys(first, "llm-pretrain"), **dict.fromkeys(second, "vision")}
        assert len(found) == 4 and reader.calls == 3  # one ListClusters page, one ListClusterNodes per cluster


def test_an_idle_hyperpod_node_is_reported_with_its_cluster_and_never_stopped() -> None:
    with mock_aws():
        local = create_shared("us-east-1")
        ec2 = boto3.client("ec2", region_name="us-east-1")
        node, plain, claimed = _launch(ec2, "p5.48xlarge", 3)
        ec2.create_tags(Resources=[claimed], Tags=[{"Key": "sagemaker:cluster-name", "Value": "llm-pretrain"}])
        for instance_id in (node, plain, claimed):
            _metrics(instance_id, 0.2)
        _cluster("llm-pretrain")
        runtime = _runtime(local)
        aws = _aws(Ec2Reader("us-east-1", wildcard_type_filter=False))
        aws.hyperpod = Nodes(HyperPodNodes("us-east-1"), [node])
        for step in range(4):
            handle(_event(T0 + dt.timedelta(minutes=30 * step), f"sweep-{step}"), runtime, aws)

        assert _state(ec2, node) == "running"
        assert _state(ec2, plain) == "stopped" and _state(ec2, claimed) == "stopped"  # a tag proves nothing
        items = ledger_items(runtime, T0 - dt.timedelta(days=1))
        decisions = [i for i in items if i.get("resource") == node and i.get("policy") == "idle"]
        assert decisions and all(
            a.get("type") not in ("stop", "terminate") for d in decisions for a in d.get("actions") or []
        )
        assert decisions[-1]["evidence"]["purchase"]["kind"] == "hyperpod"
        assert decisions[-1]["evidence"]["purchase"]["cluster"] == "llm-pretrain"
        assert any(
            "SageMaker HyperPod cluster llm-pretrain" in r and "through SageMaker" in r
            for d in decisions
            for r in d.get("reasons") or []
        )
