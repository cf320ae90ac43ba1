"""GPU metrics of a cluster's nodes from Prometheus' HTTP API (``/api/v1/query_range``): Amazon Managed Service for
Prometheus (``https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>``, requests signed with SigV4 for service
``aps`` by botocore's own signer, permission ``aps:QueryMetrics``) or any Prometheus-compatible endpoint the function
can reach. One range query per signal and one ``kube_node_info`` query per fetch, whatever the number of nodes; the
PromQL is ``governor.idle.kubernetes.promql``'s. urllib3 (botocore's own HTTP library) carries the requests: no new
dependency in the Lambda layer.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit

from governor.idle.domain import GPU_PODS, Series
from governor.idle.kubernetes.promql import (
    DCGM_FIELDS,
    GpuHours,
    NodeReadings,
    attribute,
    gpu_pod_series,
    gpu_query,
    node_instances,
    node_query,
    read_matrix,
)

IAM_ACTIONS = frozenset({"aps:QueryMetrics"})
STEP_SECONDS = 60
#: Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS = 11_000
TIMEOUT_SECONDS = 10.0
_AMP_HOST = re.compile(r"^aps-workspaces\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


class PrometheusError(RuntimeError):
    """The endpoint answered with an error, or not at all: the cluster's nodes go unmonitored (never idle)."""


def amp_region(url: str) -> str | None:
    """The region of an Amazon Managed Prometheus workspace URL (requests to it are SigV4-signed), else None."""
    match = _AMP_HOST.match(urlsplit(url).hostname or "")
    return match.group(1) if match else None


def sigv4_headers(method: str, url: str, region: str, credentials: Any) -> dict[str, str]:
    """The headers botocore's SigV4 signer adds for service ``aps``."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(method=method, url=url)
    SigV4Auth(credentials, "aps", region).add_auth(request)
    return {key: str(value) for key, value in request.headers.items()}


class PrometheusMetrics:
    """Implements ``governor.idle.domain.MetricSource`` for one cluster's DCGM exporter metrics in Prometheus.

    ``readings`` keeps the last fetch's per-node readings (with the pods that held each GPU) for attribution.
    ``sign`` (region) signs every request with SigV4 for ``aps``; it defaults to the region of an AMP URL.
    """

    def __init__(
        self,
        url: str,
        *,
        node_label: str = "Hostname",
        selector: str = "",
        sign: str | None = None,
        credentials: Callable[[], Any] | None = None,
        http: Any = None,
    ) -> None:
        self._url = url.rstrip("/")
        self._node_label = node_label
        self._selector = selector
        self._region = sign or amp_region(url)
        self._credentials = credentials or _session_credentials
        self._http = http
        self.readings: dict[str, NodeReadings] = {}
        self.unmatched: list[str] = []
        #: instance id -> why the last fetch refused its series (its node claimed twice, or it claimed by two nodes).
        self.refused: dict[str, str] = {}
        self.calls = 0

    def fetch(
        self, instance_ids: Sequence[str], signals: Sequence[str], start: dt.datetime, end: dt.datetime
    ) -> dict[str, dict[str, Series]]:
        """Every GPU signal DCGM publishes, per device, of the instances asked for that are nodes of this cluster;
        instances it has no series for are left out (the caller reads them elsewhere, or they are unmonitored)."""
        wanted = [s for s in signals if s in DCGM_FIELDS]
        if not wanted:
            return {}
        begin = start.replace(second=0, microsecond=0)
        known, doubled = node_instances(self._query(node_query(self._selector), begin, end, instant=True))
        answers = {
            signal: self._query(gpu_query(signal, self._node_label, self._selector), begin, end) for signal in wanted
        }
        readings, self.unmatched = read_matrix(answers, self._node_label, known)
        ids = set(instance_ids)
        self.refused = {}
        for node, claimed in doubled.items():
            for instance in claimed:
                self.refused[instance] = f"kube_node_info maps node {node} to {' and '.join(claimed)}"
        for instance, reading in readings.items():
            if len(reading.nodes) > 1:
                self.refused[instance] = f"series of nodes {' and '.join(sorted(reading.nodes))} all claim it"
            elif reading.nodes & set(doubled):
                self.refused[instance] = f"its node {reading.node} is mapped to several instances"
        self.refused = {i: why for i, why in self.refused.items() if i in ids}
        self.readings = {i: r for i, r in readings.items() if i in ids and i not in self.refused}
        return {i: {**r.series, GPU_PODS: gpu_pod_series(r)} for i, r in self.readings.items()}

    def nodes_of(self, instance_id: str) -> set[str]:
        """The node names the last fetch's series of ``instance_id`` were published under."""
        reading = self.readings.get(instance_id)
        return set(reading.nodes) if reading is not None else set()

    def keep_only(self, instance_ids: set[str]) -> None:
        """Forget the readings of instances this source may not speak for (namespace attribution counts none)."""
        self.readings = {i: r for i, r in self.readings.items() if i in instance_ids}

    def gpu_hours(self, threshold: float, teams: Mapping[str, str], start: float, end: float) -> list[GpuHours]:
        """GPU-hours by namespace of the last fetch's nodes, from the pods DCGM mapped to each GPU (``attribute``)."""
        return attribute(self.readings, threshold, teams, start, end)

    def range_query(self, promql: str, start: dt.datetime, end: dt.datetime) -> list[Any]:
        """One range query's ``data.result`` (the team's PromQL activity signals, ``governor.idle.activity_source``)."""
        return self._query(promql, start.replace(second=0, microsecond=0), end)

    def _query(self, promql: str, start: dt.datetime, end: dt.datetime, *, instant: bool = False) -> list[Any]:
        if instant:
            path, params = "/api/v1/query", {"query": promql, "time": f"{end.timestamp():.3f}"}
        else:
            step = max(STEP_SECONDS, int((end - start).total_seconds() // MAX_POINTS) + 1)
            params = {
                "query": promql,
                "start": f"{start.timestamp():.3f}",
                "end": f"{end.timestamp():.3f}",
                "step": str(step),
            }
            path = "/api/v1/query_range"
        url = f"{self._url}{path}?{urlencode(params)}"
        headers = {"Accept": "application/json"}
        if self._region:
            headers.update(sigv4_headers("GET", url, self._region, self._credentials()))
        self.calls += 1
        try:
            response = self._pool().request("GET", url, headers=headers, timeout=TIMEOUT_SECONDS, retries=2)
        except Exception as error:  # urllib3's errors: connection refused, timeout, TLS
            raise PrometheusError(f"{self._url}: {type(error).__name__}: {error}") from error
        return _result(response.status, response.data, self._url)

    def _pool(self) -> Any:
        if self._http is None:
            import urllib3

            self._http = urllib3.PoolManager()
        return self._http


def _result(status: int, body: bytes, where: str) -> list[Any]:
    """``data.result`` of a Prometheus API answer, or a clear error naming the endpoint."""
    try:
        answer: Mapping[str, Any] = json.loads(body or b"{}")
    except ValueError:
        raise PrometheusError(f"{where}: HTTP {status}, not a Prometheus API answer") from None
    if status != 200 or answer.get("status") != "success":
        raise PrometheusError(
            f"{where}: HTTP {status}, {answer.get('errorType', '')} {answer.get('error', '')}".strip()
        )
    data = answer.get("data") or {}
    result = data.get("result") if isinstance(data, Mapping) else None
    return list(result) if isinstance(result, list) else []


def _session_credentials() -> Any:
    from governor.adapters.aws import session

    credentials = session().get_credentials()
    if credentials is None:
        raise PrometheusError("no AWS credentials to sign Amazon Managed Prometheus requests with")
    return credentials.get_frozen_credentials()
