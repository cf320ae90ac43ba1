"""Reclaiming an idle EKS GPU node through its owner, against a Kubernetes API server on the loopback interface that
serves exactly the endpoints the governor calls. Its answers are built with the official ``kubernetes`` client's
models (a test dependency), and every request body is read back into those models, so a body the real API server
would refuse fails here too. There is no kube-apiserver in any registry package this project can install."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client as k8s

from governor.idle.kubernetes.api import KubernetesApi, eks_token
from governor.idle.kubernetes.reclaim import reclaim_node
from governor_cli.testing import kubeapi

INSTANCE = "i-0123456789abcdef0"
NODE = "ip-10-0-1-5.ec2.internal"
SERIALIZE = k8s.ApiClient().sanitize_for_serialization


class _Body:
    def __init__(self, data: Any) -> None:
        self.data = json.dumps(data)


def as_model(data: Any, kind: str) -> Any:
    """Read JSON into the official client's model (what a body the API server accepts must fit)."""
    return k8s.ApiClient().deserialize(_Body(data), kind)


def node(labels: dict[str, str], provider: str = f"aws:///us-east-1a/{INSTANCE}") -> dict[str, Any]:
    return SERIALIZE(
        k8s.V1Node(
            api_version="v1",
            kind="Node",
            metadata=k8s.V1ObjectMeta(name=NODE, labels=labels),
            spec=k8s.V1NodeSpec(provider_id=provider),
        )
    )


def pod(
    namespace: str, name: str, *, owner: str | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    refs = [k8s.V1OwnerReference(api_version="apps/v1", kind=owner, name="x", uid="u")] if owner else None
    return SERIALIZE(
        k8s.V1Pod(
            api_version="v1",
            kind="Pod",
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, owner_references=refs, annotations=annotations),
            spec=k8s.V1PodSpec(node_name=NODE, containers=[k8s.V1Container(name="main")]),
            status=k8s.V1PodStatus(phase="Running"),
        )
    )


class FakeApiServer(kubeapi.FakeApiServer):
    """The loopback API server (``governor_cli.testing.kubeapi``) with every request body and list it answers read
    into the official client's models."""

    def check(self, data: Any, kind: str) -> None:
        as_model(data, kind)


def _karpenter_cluster() -> FakeApiServer:
    return FakeApiServer(
        node=node({"karpenter.sh/nodepool": "gpu-h100", "node.kubernetes.io/instance-type": "p5.48xlarge"}),
        pods=[
            pod("research", "notebook-0"),  # allocated but idle
            pod("kube-system", "nvidia-dcgm-exporter-abcde", owner="DaemonSet"),
            pod("kube-system", "kube-proxy-node", annotations={"kubernetes.io/config.mirror": "x"}),
        ],
        claims=[
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {"name": "gpu-h100-x7k2p", "labels": {"karpenter.sh/nodepool": "gpu-h100"}},
                "status": {"nodeName": NODE, "providerID": f"aws:///us-east-1a/{INSTANCE}"},
            }
        ],
    )


@pytest.fixture
def karpenter() -> Iterator[tuple[FakeApiServer, KubernetesApi]]:
    server = _karpenter_cluster()
    url = server.start()
    yield server, KubernetesApi(url, lambda: "k8s-aws-v1.test")
    server.stop()


def test_a_karpenter_node_is_cordoned_drained_and_its_nodeclaim_deleted(
    karpenter: tuple[FakeApiServer, KubernetesApi],
) -> None:
    server, api = karpenter
    done = reclaim_node(api, NODE, INSTANCE, enforce=True)
    assert done.owner == "karpenter" and done.pool == "gpu-h100" and done.blocked is None and done.removed
    assert done.evicted == ["research/notebook-0"]
    assert done.skipped == [
        "kube-system/nvidia-dcgm-exporter-abcde (DaemonSet)",
        "kube-system/kube-proxy-node (static pod)",
    ]
    assert server.node["spec"]["unschedulable"] is True and server.claims == []
    order = [(m, p) for m, p, _ in server.calls]
    assert (
        order.index(("PATCH", f"/api/v1/nodes/{NODE}"))
        < order.index(("POST", "/api/v1/namespaces/research/pods/notebook-0/eviction"))
        < order.index(("DELETE", "/apis/karpenter.sh/v1/nodeclaims/gpu-h100-x7k2p"))
    )
    assert all(token == "Bearer k8s-aws-v1.test" for token in server.tokens)


def test_report_only_changes_nothing(karpenter: tuple[FakeApiServer, KubernetesApi]) -> None:
    server, api = karpenter
    done = reclaim_node(api, NODE, INSTANCE, enforce=False)
    assert done.steps == [
        "would cordon " + NODE,
        "would evict 1 pods",
        "would delete NodeClaim gpu-h100-x7k2p (node pool gpu-h100)",
    ]
    assert {m for m, _, _ in server.calls} == {"GET"} and not done.removed


def test_a_pod_disruption_budget_stops_the_drain(karpenter: tuple[FakeApiServer, KubernetesApi]) -> None:
    server, api = karpenter
    server.protected = {"research/notebook-0"}
    done = reclaim_node(api, NODE, INSTANCE, enforce=True)
    assert "PodDisruptionBudget" in str(done.blocked) and not done.removed
    assert server.node["spec"]["unschedulable"] is True and len(server.claims) == 1  # cordoned, not removed


def test_a_node_that_is_another_instance_is_not_touched(karpenter: tuple[FakeApiServer, KubernetesApi]) -> None:
    server, api = karpenter
    done = reclaim_node(api, NODE, "i-0fffffffffffffff0", enforce=True)
    assert "not touched" in str(done.blocked) and [m for m, _, _ in server.calls] == ["GET"]


def test_a_managed_node_group_node_is_drained_then_terminated_in_its_group() -> None:
    server = FakeApiServer(node=node({"eks.amazonaws.com/nodegroup": "h100"}), pods=[pod("serving", "llm-0")])
    api = KubernetesApi(server.start(), lambda: "t")
    terminated: list[str] = []
    try:
        done = reclaim_node(api, NODE, INSTANCE, enforce=True, terminate_in_group=terminated.append)
    finally:
        server.stop()
    assert done.owner == "managed_node_group" and done.evicted == ["serving/llm-0"] and terminated == [INSTANCE]
    assert done.steps[-1] == f"terminate {INSTANCE} in node group h100, desired capacity lowered"


def test_a_node_no_autoscaler_owns_is_not_drained() -> None:
    server = FakeApiServer(node=node({}), pods=[pod("a", "b")])
    api = KubernetesApi(server.start(), lambda: "t")
    try:
        done = reclaim_node(api, NODE, INSTANCE, enforce=True)
    finally:
        server.stop()
    assert "no owner" in str(done.blocked) and [m for m, _, _ in server.calls] == ["GET"]


def test_the_eks_token_is_a_presigned_get_caller_identity_naming_the_cluster() -> None:
    import boto3

    sts = boto3.client("sts", region_name="us-east-1", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret")
    token = eks_token("gpu-prod", "us-east-1", sts)
    assert token.startswith("k8s-aws-v1.") and "=" not in token
    url = base64.urlsafe_b64decode(token.removeprefix("k8s-aws-v1.") + "==").decode()
    query = parse_qs(urlsplit(url).query)
    assert query["Action"] == ["GetCallerIdentity"] and "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0]
    assert query["X-Amz-Expires"] == ["60"]


def test_every_call_is_one_the_shipped_rbac_allows(karpenter: tuple[FakeApiServer, KubernetesApi]) -> None:
    """deploy/kubernetes/governor-rbac.yaml grants exactly what a reclaim calls, no verb more."""
    import yaml

    server, api = karpenter
    reclaim_node(api, NODE, INSTANCE, enforce=True)
    rbac = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "governor-rbac.yaml"
    role = next(d for d in yaml.safe_load_all(rbac.read_text()) if d["kind"] == "ClusterRole")
    granted = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    verbs = {"GET": "get", "PATCH": "patch", "POST": "create", "DELETE": "delete"}
    used = set()
    for method, path, _ in server.calls:
        parts = path.strip("/").split("/")
        if path.endswith("/eviction"):
            used.add(("pods/eviction", "create"))
        elif parts[-1] in ("pods", "nodes", "nodeclaims"):
            used.add((parts[-1], "list"))
        else:
            used.add((parts[-2], verbs[method]))
    assert used <= granted and granted - used <= {("nodes", "list")}  # list nodes: finding the node by instance id
