"""EKS clusters in member accounts (issue 39): a cluster with ``account`` and ``region`` is judged in that target's
sweep only, its AMP workspace signed with the spoke role's credentials there, and its API reached as the spoke role
(DescribeCluster in the member account, the EKS token presigned with the spoke role's keys), on moto: the cluster
exists in the member account only, its endpoint the loopback Kubernetes API server. moto does not evaluate IAM; the
spoke role's grants and access entry are checked on the template (tests/infra/test_member_clusters.py)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import boto3
import pytest
from moto import mock_aws

from governor.adapters.aws import Organization, client
from governor.idle.handler import target_aws
from governor.idle.kubernetes.prometheus import PrometheusMetrics
from governor.idle.sources import CombinedMetrics
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing.dcgm import PrometheusServer
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.adapters.org_accounts import account_session, spoke_role
from tests.adapters.test_kubernetes_reclaim import INSTANCE, _karpenter_cluster

HUB, MEMBER, REGION = "123456789012", "222222222222", "us-east-1"
CLUSTER = "gpu-member"


@pytest.fixture
def org() -> Iterator[None]:
    with mock_aws():
        client.cache_clear()
        spoke_role(account_session(MEMBER, REGION), "idle", REGION, HUB)
        client.configure(Organization("GovernorSpoke", HUB, "idle"))
        yield
        client.configure(None)
    client.cache_clear()


def _runtime(url: str) -> Runtime:
    clusters = [
        {
            "name": CLUSTER,
            "metric_source": "prometheus",
            "prometheus_url": url,
            "sigv4_region": REGION,
            "reclaim": "drain",
            "account": MEMBER,
            "region": REGION,
        },
        {"name": "gpu-home", "metric_source": "container_insights"},
    ]
    return Runtime(
        policy=parse_policy({"idle": {"enforce": True, "clusters": clusters}}),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region=REGION,
    )


def _credential(authorization_or_url: str) -> str:
    """The access key id a SigV4 ``Authorization`` header or presigned URL was made with."""
    if authorization_or_url.startswith("AWS4-HMAC-SHA256"):
        return authorization_or_url.split("Credential=", 1)[1].split("/", 1)[0]
    return parse_qs(urlparse(authorization_or_url).query)["X-Amz-Credential"][0].split("/", 1)[0]


def test_a_member_cluster_is_read_and_drained_as_the_spoke_role_in_its_account(
    org: None, prometheus: tuple[PrometheusServer, str]
) -> None:
    server, url = prometheus
    api = _karpenter_cluster()
    api_url = api.start()
    try:
        eks = account_session(MEMBER, REGION).client("eks")
        eks.create_cluster(name=CLUSTER, roleArn=f"arn:aws:iam::{MEMBER}:role/eks", resourcesVpcConfig={})
        from moto.eks.models import eks_backends

        found = eks_backends[MEMBER][REGION].clusters[CLUSTER]
        found.endpoint, found.certificate_authority = api_url, {}  # emulator set-up: moto makes up a host

        runtime = _runtime(url)
        spoke_key = client.credentials(MEMBER, REGION).access_key
        hub_key = boto3.Session().get_credentials().get_frozen_credentials().access_key  # type: ignore[union-attr]
        assert spoke_key != hub_key

        member = target_aws({"account": MEMBER, "region": REGION, "id": "sweep-1"}, runtime)
        sources = member.metrics
        assert isinstance(sources, CombinedMetrics) and set(sources.clusters) == {CLUSTER}  # the home cluster is not
        prometheus_source = sources.clusters[CLUSTER]
        assert isinstance(prometheus_source, PrometheusMetrics)
        now = dt.datetime.now(dt.UTC)
        prometheus_source.fetch([INSTANCE], ["gpu_utilization"], now - dt.timedelta(minutes=30), now)
        signed = [headers.get("Authorization", "") for _, _, headers in server.requests]
        assert signed and all(_credential(a) == spoke_key for a in signed)  # AMP signed as the spoke role

        assert member.nodes is not None
        done = member.nodes.reclaim(INSTANCE, CLUSTER, enforce=True)
        assert done.removed and done.evicted == ["research/notebook-0"], done
        (token,) = set(api.tokens)
        presigned = base64.urlsafe_b64decode(token.removeprefix("Bearer k8s-aws-v1.") + "==").decode()
        assert _credential(presigned) == spoke_key  # the cluster maps the spoke role through its access entry
        assert "Action=GetCallerIdentity" in presigned

        home = target_aws({"account": HUB, "region": REGION, "id": "sweep-2"}, runtime)
        assert isinstance(home.metrics, CombinedMetrics) and set(home.metrics.clusters) == {"gpu-home"}
        assert home.nodes is None  # the member's drain is not the hub's
    finally:
        api.stop()


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ({"account": MEMBER}, "account and region go together"),
        ({"account": "22", "region": REGION}, "idle.clusters.0.account"),
    ],
)
def test_a_member_cluster_needs_its_account_and_region(cluster: dict[str, Any], message: str) -> None:
    from governor.policy import PolicyError

    with pytest.raises((PolicyError, ValueError), match=message):
        parse_policy({"idle": {"clusters": [{"name": "c", "metric_source": "container_insights", **cluster}]}})
