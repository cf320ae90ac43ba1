"""The few Kubernetes API calls the governor makes on an EKS cluster, over urllib3 with an EKS bearer token.

Why not the official ``kubernetes`` client: the Lambda layer is shared by every function, and the client with its
dependencies is ~39 MB unzipped (kubernetes 35.0.0: 36 MB of generated models, plus oauthlib, requests-oauthlib,
websocket-client) for five endpoints. The bodies sent and read here are checked against the official client's models
in the tests (``tests/adapters/test_kubernetes_reclaim.py``), where that client is a test dependency.

Authentication is what ``aws eks get-token`` does: a presigned STS ``GetCallerIdentity`` URL carrying the
``x-k8s-aws-id`` header, base64url-encoded behind ``k8s-aws-v1.``; the cluster maps the function's role to a
Kubernetes identity through an EKS access entry (docs/kubernetes.md). The endpoint and CA come from
``eks:DescribeCluster``.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

IAM_ACTIONS = frozenset({"eks:DescribeCluster"})
#: The Kubernetes group the idle role's EKS access entry maps it to; deploy/kubernetes/governor-rbac.yaml binds it.
KUBERNETES_GROUP = "gpu-fleet-governor"
TIMEOUT_SECONDS = 10.0
TOKEN_SECONDS = 60


class KubernetesError(RuntimeError):
    """An API call the server refused: ``status`` is the HTTP status (429: a PodDisruptionBudget blocks eviction)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def eks_token(cluster: str, region: str | None, sts: Any = None) -> str:
    """A bearer token for ``cluster``, as ``aws eks get-token`` makes it (valid 15 minutes, presigned 60 s)."""
    from governor.adapters.aws import client

    sts = sts or client("sts", region)

    def add_cluster(request: Any, **_: Any) -> None:
        request.headers["x-k8s-aws-id"] = cluster

    events = sts.meta.events
    events.register("before-sign.sts.GetCallerIdentity", add_cluster)
    try:
        url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=TOKEN_SECONDS, HttpMethod="GET")
    finally:
        events.unregister("before-sign.sts.GetCallerIdentity", add_cluster)
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class KubernetesApi:
    """GET / PATCH / POST / DELETE JSON on one API server; ``token`` is asked for before each call (cheap, local)."""

    def __init__(
        self, endpoint: str, token: Callable[[], str], *, ca_data: str | None = None, http: Any = None
    ) -> None:
        self._endpoint = endpoint.rstrip("/")
        self._token = token
        self._ca_data = ca_data
        self._http = http
        self.calls: list[tuple[str, str]] = []

    def get(self, path: str, **params: str) -> dict[str, Any]:
        return self._call("GET", path, params=params)

    def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("PATCH", path, body=body, content_type="application/strategic-merge-patch+json")

    def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("POST", path, body=body)

    def delete(self, path: str) -> dict[str, Any]:
        return self._call("DELETE", path)

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        url = self._endpoint + path + (f"?{urlencode(params)}" if params else "")
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        self.calls.append((method, path))
        try:
            response = self._pool().request(method, url, body=data, headers=headers, timeout=TIMEOUT_SECONDS, retries=1)
        except Exception as error:  # urllib3: connection refused, timeout, TLS
            raise KubernetesError(0, f"{method} {path}: {type(error).__name__}: {error}") from error
        try:
            answer = json.loads(response.data or b"{}")
        except ValueError:
            answer = {}
        if response.status >= 300:
            raise KubernetesError(response.status, str(answer.get("message") or response.reason or ""))
        return answer if isinstance(answer, dict) else {}

    def _pool(self) -> Any:
        if self._http is None:
            import urllib3

            if self._ca_data:
                with tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False) as ca:
                    ca.write(base64.b64decode(self._ca_data))
                self._http = urllib3.PoolManager(cert_reqs=ssl.CERT_REQUIRED, ca_certs=ca.name)
            else:
                self._http = urllib3.PoolManager()
        return self._http


def eks_api(cluster: str, region: str | None, eks: Any = None, sts: Any = None) -> KubernetesApi:
    """The API of an EKS cluster, found with ``eks:DescribeCluster``, authenticated as the function's role."""
    from governor.adapters.aws import client

    found = (eks or client("eks", region)).describe_cluster(name=cluster)["cluster"]
    return KubernetesApi(
        found["endpoint"],
        lambda: eks_token(cluster, region, sts),
        ca_data=(found.get("certificateAuthority") or {}).get("data"),
    )
