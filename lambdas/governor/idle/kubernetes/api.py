"""The few Kubernetes API calls the governor makes on an EKS cluster, through ``lightkube`` with an EKS bearer token.

The client is lightkube (typed models of every Kubernetes kind, ``ApiError`` carrying the server's ``Status``,
paginated lists, strategic-merge patches, subresources such as ``pods/eviction``): 4.8 MB unzipped with its new
dependencies (httpx2, httpcore2, anyio, h11, h2, msgspec, ...; PyYAML is in the layer already) against ~39 MB for the
official ``kubernetes`` client (docs/kubernetes.md, "The Kubernetes client"). It is imported here only, and this
module only by the idle function's drain path (``nodes.KubernetesNodes``), when a cluster is drained.

Authentication is what ``aws eks get-token`` does: a presigned STS ``GetCallerIdentity`` URL carrying the
``x-k8s-aws-id`` header, base64url-encoded behind ``k8s-aws-v1.``; the cluster maps the function's role to a
Kubernetes identity through an EKS access entry (docs/kubernetes.md). The endpoint and CA come from
``eks:DescribeCluster``. The token is valid 15 minutes: the lightkube client is built again with a new one after
``TOKEN_REUSE_SECONDS``.
"""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

IAM_ACTIONS = frozenset({"eks:DescribeCluster"})
#: The Kubernetes group the idle role's EKS access entry maps it to; deploy/kubernetes/governor-rbac.yaml binds it.
KUBERNETES_GROUP = "gpu-fleet-governor"
#: The field manager lightkube names in its writes (``managedFields``), so an operator sees who cordoned a node.
FIELD_MANAGER = "gpu-fleet-governor"
TIMEOUT_SECONDS = 10.0
TOKEN_SECONDS = 60
#: A token is valid 15 minutes; the client asks for a new one well before.
TOKEN_REUSE_SECONDS = 600
#: Karpenter's NodeClaim (``karpenter.sh/v1``), cluster-scoped.
NODECLAIM = ("karpenter.sh", "v1", "NodeClaim", "nodeclaims")


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
    """The calls a drain makes, typed by lightkube; answers as plain dicts (``to_dict``) for ``reclaim``.

    ``token`` is asked for when the client is built (cheap, local: a presigned URL). Every call an API server refuses
    raises ``KubernetesError`` with its HTTP status; a connection or TLS failure raises it with status 0.
    """

    def __init__(self, endpoint: str, token: Callable[[], str], *, ca_data: str | None = None) -> None:
        self._endpoint = endpoint.rstrip("/")
        self._token = token
        self._ca_data = ca_data
        self._client: Any = None
        self._built = 0.0

    def node(self, name: str) -> dict[str, Any]:
        from lightkube.resources.core_v1 import Node

        with self._calling(f"get node {name}"):
            return _plain(self._lightkube().get(Node, name))

    def nodes(self) -> list[dict[str, Any]]:
        from lightkube.resources.core_v1 import Node

        with self._calling("list nodes"):
            return [_plain(n) for n in self._lightkube().list(Node)]

    def cordon(self, name: str) -> None:
        from lightkube.resources.core_v1 import Node
        from lightkube.types import PatchType

        with self._calling(f"cordon node {name}"):
            self._lightkube().patch(Node, name, {"spec": {"unschedulable": True}}, patch_type=PatchType.STRATEGIC)

    def uncordon(self, name: str) -> None:
        """Undo the governor's own cordon when a drain gives up (``drain.give_up``)."""
        from lightkube.resources.core_v1 import Node
        from lightkube.types import PatchType

        with self._calling(f"un-cordon node {name}"):
            self._lightkube().patch(Node, name, {"spec": {"unschedulable": False}}, patch_type=PatchType.STRATEGIC)

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        from lightkube import ALL_NS
        from lightkube.resources.core_v1 import Pod

        with self._calling(f"list pods on {node}"):
            return [_plain(p) for p in self._lightkube().list(Pod, namespace=ALL_NS, fields={"spec.nodeName": node})]

    def evict(self, namespace: str, name: str) -> None:
        """``POST pods/{name}/eviction`` (policy/v1), which honours PodDisruptionBudgets (429 when one refuses)."""
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Pod

        body = Pod.Eviction(metadata=ObjectMeta(name=name, namespace=namespace))
        with self._calling(f"evict {namespace}/{name}"):
            self._lightkube().create(body, name=name, namespace=namespace)

    def nodeclaims(self) -> list[dict[str, Any]]:
        with self._calling("list NodeClaims"):
            return [_plain(c) for c in self._lightkube().list(_nodeclaim())]

    def delete_nodeclaim(self, name: str) -> None:
        with self._calling(f"delete NodeClaim {name}"):
            self._lightkube().delete(_nodeclaim(), name)

    @contextmanager
    def _calling(self, what: str) -> Iterator[None]:
        import httpx2
        from lightkube import ApiError

        try:
            yield
        except ApiError as error:
            status = error.status
            raise KubernetesError(int(status.code or 0), f"{what}: {status.message or status.reason or ''}") from error
        except httpx2.HTTPError as error:  # connection refused, timeout, TLS
            raise KubernetesError(0, f"{what}: {type(error).__name__}: {error}") from error

    def _lightkube(self) -> Any:
        if self._client is None or time.monotonic() - self._built > TOKEN_REUSE_SECONDS:
            import httpx2
            from lightkube import Client, KubeConfig
            from lightkube.config.models import Cluster, User

            cluster = Cluster(server=self._endpoint, certificate_auth_data=self._ca_data)
            config = KubeConfig.from_one(cluster=cluster, user=User(token=self._token()))
            self._client = Client(
                config=config,
                timeout=httpx2.Timeout(TIMEOUT_SECONDS),
                trust_env=False,
                field_manager=FIELD_MANAGER,
            )
            self._built = time.monotonic()
        return self._client


def _plain(resource: Any) -> dict[str, Any]:
    found = resource.to_dict() if hasattr(resource, "to_dict") else dict(resource)
    return found if isinstance(found, dict) else {}


@functools.cache
def _nodeclaim() -> Any:
    from lightkube.generic_resource import create_global_resource

    return create_global_resource(*NODECLAIM)


def eks_api(cluster: str, region: str | None, eks: Any = None, sts: Any = None) -> KubernetesApi:
    """The API of an EKS cluster, found with ``eks:DescribeCluster``, authenticated as the function's role."""
    from governor.adapters.aws import client

    found = (eks or client("eks", region)).describe_cluster(name=cluster)["cluster"]
    return KubernetesApi(
        found["endpoint"],
        lambda: eks_token(cluster, region, sts),
        ca_data=(found.get("certificateAuthority") or {}).get("data"),
    )
