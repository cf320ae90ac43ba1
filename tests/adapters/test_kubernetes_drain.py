"""Issues 46.4 and 45.2 (Kubernetes half): a Kubernetes reclaim is a state machine kept in the ledger (cordoned ->
drained -> removing -> gone) that resumes where it stopped, tells the owner only what happened, and un-cordons and
says so when it gives up. Through the real idle sweep on moto, DCGM through the loopback Prometheus, and the loopback
Kubernetes API server made to fail the way the issues saw: an eviction answered with HTTP 500, a PodDisruptionBudget,
a node that vanished, Karpenter still removing the node, a managed node group's node carrying a Karpenter label."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.idle.domain import IDLE_ACTION_TAG, MARK_KIND
from governor.idle.handler import handle
from governor.idle.kubernetes.api import KubernetesApi
from governor.idle.kubernetes.nodes import KubernetesNodes
from governor.idle.sources import metric_source
from governor_cli.testing.dcgm import PrometheusServer
from tests.adapters.test_idle_sweep import T0, _aws, _event, _runtime, _tags
from tests.adapters.test_kubernetes_reclaim import FakeApiServer, _karpenter_cluster, node, pod
from tests.adapters.test_kubernetes_sweep import _karpenter_node, _node_group, _scrape


class Cluster:
    """One idle node of cluster gpu-prod (``reclaim: drain``), its API server, and sweeps every 15 minutes."""

    def __init__(self, prometheus: tuple[PrometheusServer, str], api: FakeApiServer, instance: str) -> None:
        server, url = prometheus
        _scrape(server, instance)
        self.instance, self.api = instance, api
        self.url = api.start()
        cluster = {"name": "gpu-prod", "metric_source": "prometheus", "prometheus_url": url, "node_label": "hostname"}
        self.runtime = _runtime(clusters=[{**cluster, "reclaim": "drain"}])
        self.aws = _aws(
            metrics=metric_source("cloudwatch_agent", "us-east-1", clusters=self.runtime.policy.idle.clusters)
        )  # type: ignore[arg-type]
        self.aws.nodes = KubernetesNodes(
            "us-east-1", self.aws.groups, api=lambda c: KubernetesApi(self.url, lambda: "t")
        )
        self.sweeps = 0

    def sweep(self) -> dict[str, Any]:
        """The next sweep: T0, then 30 minutes later (the warning has run out), then every 15 minutes."""
        at = T0 + dt.timedelta(minutes=0 if self.sweeps == 0 else 15 + 15 * self.sweeps)
        self.sweeps += 1
        return handle(_event(at, f"sweep-{self.sweeps}"), self.runtime, self.aws)

    def findings(self, since: int = 0) -> list[Any]:
        return [f for f in self.runtime.sink.findings[since:] if f.resource == self.instance]  # type: ignore[attr-defined]

    def titles(self, since: int = 0) -> list[str]:
        return [f.title for f in self.findings(since)]

    def drain(self) -> dict[str, Any]:
        """The drain's ledger record (imported here: the state machine is what these tests are about)."""
        from governor.idle.kubernetes.drain_state import DRAIN_KIND

        return self.runtime.ledger.get_item(DRAIN_KIND, self.instance)


def _terminated(titles: list[str]) -> list[str]:
    """Titles saying the node was terminated (not the warning's "will be terminated at")."""
    return [t for t in titles if " terminated" in t and not any(w in t for w in ("will be terminated", "not yet"))]


@pytest.fixture
def karpenter(prometheus: tuple[PrometheusServer, str]) -> Iterator[Cluster]:
    with mock_aws():
        instance = _karpenter_node()
        api = _karpenter_cluster()
        for held in (api.node["spec"], api.claims[0]["status"]):
            held["providerID"] = f"aws:///us-east-1a/{instance}"
        cluster = Cluster(prometheus, api, instance)
        yield cluster
        api.stop()


def test_an_eviction_answered_with_http_500_is_not_reported_as_terminated_and_resumes(karpenter: Cluster) -> None:
    """The drain stops at "cordoned" with the API's answer recorded; the owner hears that, not "terminated"; the
    instance is not tagged as reclaimed; the next sweep resumes the drain (no fresh warning) and, once it succeeds,
    exactly one "terminated" finding is posted."""
    cluster = karpenter
    ec2 = boto3.client("ec2", region_name="us-east-1")
    cluster.api.failures = {("POST", "/eviction"): 500}
    assert cluster.sweep()["outcomes"] == {"warned": 1}
    seen = len(cluster.runtime.sink.findings)  # type: ignore[attr-defined]
    assert cluster.sweep()["outcomes"] == {"acted": 1}
    titles = cluster.titles(seen)
    assert not _terminated(titles), titles
    assert any("drain stopped at cordoned" in t and "HTTP 500" in t for t in titles), titles
    assert IDLE_ACTION_TAG not in _tags(ec2, cluster.instance)
    drain = cluster.drain()
    assert drain["state"] == "cordoned" and "HTTP 500" in drain["problem"] and drain["cordoned_by_us"]
    assert any(not step["ok"] and "HTTP 500" in step.get("reason", "") for step in drain["history"])
    assert cluster.api.node["spec"]["unschedulable"] is True and len(cluster.api.claims) == 1
    assert cluster.runtime.ledger.get_item(MARK_KIND, cluster.instance)  # the spell goes on: no fresh warning

    cluster.api.failures = {}
    seen = len(cluster.runtime.sink.findings)  # type: ignore[attr-defined]
    third = cluster.sweep()
    assert third["outcomes"] == {"acted": 1}, third
    assert "idle.warned" not in {f.rule for f in cluster.findings(seen)}
    assert cluster.api.claims == [] and cluster.drain()["state"] == "gone"
    everything = cluster.titles()
    assert len(_terminated(everything)) == 1, everything
    assert IDLE_ACTION_TAG in _tags(ec2, cluster.instance)


def test_a_cordon_that_times_out_changes_nothing_and_says_so(karpenter: Cluster) -> None:
    """The API server's gateway gives up on the cordon (504, what a cordon hanging past the client's timeout comes
    to): nothing was changed, the owner hears that the drain did not start, and the next sweep tries again."""
    cluster = karpenter
    cluster.api.failures = {("PATCH", f"/api/v1/nodes/{cluster.api.node_name}"): 504}
    cluster.sweep()
    seen = len(cluster.runtime.sink.findings)  # type: ignore[attr-defined]
    cluster.sweep()
    titles = cluster.titles(seen)
    assert not _terminated(titles) and any("drain not started" in t and "HTTP 504" in t for t in titles), titles
    assert not cluster.api.node["spec"].get("unschedulable") and len(cluster.api.pods) == 3
    cluster.api.failures = {}
    cluster.sweep()
    assert cluster.drain()["state"] == "gone" and len(_terminated(cluster.titles())) == 1


def test_a_drain_a_pod_disruption_budget_blocks_says_so_every_sweep_then_gives_up_and_uncordons(
    karpenter: Cluster,
) -> None:
    cluster = karpenter
    cluster.api.protected = {"research/notebook-0"}
    cluster.sweep()
    seen = len(cluster.runtime.sink.findings)  # type: ignore[attr-defined]
    cluster.sweep()
    assert not _terminated(cluster.titles(seen)), cluster.titles(seen)
    from governor.idle.kubernetes.drain_state import MAX_ATTEMPTS

    for _ in range(MAX_ATTEMPTS - 2):
        cluster.sweep()
        assert cluster.api.node["spec"]["unschedulable"] is True
    blocked = [f for f in cluster.findings(seen) if "blocked by a PodDisruptionBudget" in f.title]
    assert len(blocked) == MAX_ATTEMPTS - 1 and len({f.id for f in blocked}) == MAX_ATTEMPTS - 1  # every sweep
    seen = len(cluster.runtime.sink.findings)  # type: ignore[attr-defined]
    cluster.sweep()  # the last attempt: still blocked, so the drain gives up
    assert cluster.api.node["spec"]["unschedulable"] is False  # un-cordoned
    (gave_up,) = [t for t in cluster.titles(seen) if "given up" in t]
    assert "un-cordoned" in gave_up and "PodDisruptionBudget" in gave_up
    assert not _terminated(cluster.titles()) and len(cluster.api.claims) == 1
    assert cluster.drain()["state"] == "gave-up"
    assert [m for m, p, _ in cluster.api.calls if m == "PATCH"] == ["PATCH", "PATCH"]  # cordon, then un-cordon


def test_a_node_that_vanished_mid_drain_is_a_finding_of_its_own_every_sweep(karpenter: Cluster) -> None:
    cluster = karpenter
    cluster.api.failures = {("POST", "/eviction"): 500}
    cluster.sweep()
    cluster.sweep()  # cordoned, eviction failed
    cluster.api.node_gone = True  # the node left the cluster; its instance still runs
    seen = len(cluster.runtime.sink.findings)  # type: ignore[attr-defined]
    cluster.sweep()
    cluster.sweep()
    titles = cluster.titles(seen)
    vanished = [t for t in titles if "not reclaimed: no node of cluster gpu-prod is instance" in t]
    assert len(vanished) == 2, titles  # says so every sweep, never a silent skip
    assert not _terminated(cluster.titles()) and "idle.warned" not in {f.rule for f in cluster.findings(seen)}
    assert cluster.drain()["state"] == "no-path"


def test_a_drain_that_succeeds_says_terminated_once_and_only_after_the_node_is_gone(karpenter: Cluster) -> None:
    """Karpenter takes minutes to remove a node after its NodeClaim is deleted: the owner hears "removing" first and
    "terminated" once a later re-read finds the node gone, each once, with distinct ids."""
    cluster = karpenter
    cluster.api.karpenter = False  # the node stays while Karpenter drains it
    cluster.sweep()
    seen = len(cluster.runtime.sink.findings)  # type: ignore[attr-defined]
    cluster.sweep()
    titles = cluster.titles(seen)
    assert cluster.api.claims == [] and not _terminated(titles), titles
    assert any("its owner is removing it" in t for t in titles) and cluster.drain()["state"] == "removing"
    cluster.api.node_gone = True  # Karpenter finished
    cluster.sweep()
    cluster.sweep()
    everything = cluster.findings()
    assert len(_terminated([f.title for f in everything])) == 1, [f.title for f in everything]
    assert len({f.id for f in everything}) == len(everything)
    assert cluster.drain()["state"] == "gone"


@mock_aws
def test_a_managed_node_group_node_carrying_a_karpenter_label_has_no_reclaim_path_and_is_never_touched(
    prometheus: tuple[PrometheusServer, str],
) -> None:
    instance = _node_group()
    labels = {"eks.amazonaws.com/nodegroup": "h100", "karpenter.sh/nodepool": "gpu-h100"}
    api = FakeApiServer(node=node(labels, provider=f"aws:///us-east-1a/{instance}"), pods=[pod("serving", "llm-0")])
    cluster = Cluster(prometheus, api, instance)
    try:
        cluster.sweep()
        seen = len(cluster.runtime.sink.findings)  # type: ignore[attr-defined]
        cluster.sweep()
        cluster.sweep()
        titles = cluster.titles(seen)
        no_path = [t for t in titles if "reclaim path does not exist" in t]
        assert len(no_path) == 2 and not _terminated(titles), titles
        assert not api.node["spec"].get("unschedulable") and {m for m, _, _ in api.calls} == {"GET"}
        assert api.pods != []
    finally:
        api.stop()
