"""A Kubernetes API server on the loopback interface that serves exactly the endpoints the governor's reclaim calls
(``governor.idle.kubernetes.reclaim``): list nodes, GET/PATCH one node, list pods by node, evict a pod
(``policy/v1`` Eviction; 429 for a pod a PodDisruptionBudget protects), list/delete Karpenter NodeClaims.

It is a fake, not kube-apiserver (no registry package this project can install provides one): its state is plain
JSON and it changes only what those calls change. ``check(data, kind)`` is called on every request body and every
list it answers with the official client's model name (``V1Node``, ``V1Eviction``, ``V1NodeList``, ``V1PodList``);
the tests override it to read each into the official ``kubernetes`` client's models (a test dependency), so a body
the real API server would refuse fails there. The demo uses it as is (``governor_cli.demo.capabilities.idle.eks``).
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from governor_cli.testing.dcgm import serve

NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"


def _status(code: int, reason: str = "", message: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Success" if code < 300 else "Failure"}
    if code >= 300:
        body |= {"code": code, "reason": reason, "message": message}
    return body


@dataclass
class FakeApiServer:
    """One node, the pods on it, the cluster's NodeClaims; every call kept in ``calls`` (method, path, body)."""

    node: dict[str, Any]
    pods: list[dict[str, Any]]
    claims: list[dict[str, Any]] = field(default_factory=list)
    #: ``namespace/name`` of pods a PodDisruptionBudget protects: their eviction is refused with 429.
    protected: set[str] = field(default_factory=set)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    #: NodeClaims deleted (Karpenter's termination finalizer then terminates their instances).
    deleted_claims: list[dict[str, Any]] = field(default_factory=list)
    #: Karpenter's termination finalizer, done at once: deleting the node's NodeClaim removes the node. False: the
    #: node stays until a test removes it (``node_gone``), as while Karpenter is still draining it.
    karpenter: bool = True
    #: The node is gone from the cluster (GET answers 404, the list is empty).
    node_gone: bool = False
    #: ``(method, path suffix) -> HTTP status`` the server answers instead (an eviction's 500, a cordon's 504).
    failures: dict[tuple[str, str], int] = field(default_factory=dict)

    def check(self, data: Any, kind: str) -> None:
        """Called on each request body and list answer with its model name; the tests read it into that model."""

    @property
    def node_name(self) -> str:
        return str(self.node["metadata"]["name"])

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any, headers: Any) -> tuple[int, Any]:
        """The status and JSON answer to one call (what the real API server answers, for these endpoints)."""
        node_path = f"/api/v1/nodes/{self.node_name}"
        failed = next((code for (m, end), code in self.failures.items() if m == method and path.endswith(end)), None)
        if failed is not None:
            return failed, _status(failed, "InternalError", f"{method} {path} failed")
        if self.node_gone and path.startswith("/api/v1/nodes"):
            if path == "/api/v1/nodes" and method == "GET":
                return 200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": []}
            return 404, _status(404, "NotFound", f"nodes {self.node_name} not found")
        if path == "/api/v1/nodes" and method == "GET":
            listed = {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": [self.node]}
            self.check(listed, "V1NodeList")
            return 200, listed
        if path == node_path and method == "GET":
            return 200, self.node
        if path == node_path and method == "PATCH":
            if headers.get("Content-Type") != "application/strategic-merge-patch+json":
                return 415, _status(415, "UnsupportedMediaType", str(headers.get("Content-Type")))
            self.check(body, "V1Node")
            self.node.setdefault("spec", {})["unschedulable"] = bool((body.get("spec") or {}).get("unschedulable"))
            return 200, self.node
        if path == "/api/v1/pods" and method == "GET":
            wanted = query.get("fieldSelector")
            on = [p for p in self.pods if not wanted or f"spec.nodeName={p.get('spec', {}).get('nodeName')}" in wanted]
            listed = {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": on}
            self.check(listed, "V1PodList")
            return 200, listed
        parts = path.split("/")
        if path.endswith("/eviction") and method == "POST" and len(parts) == 8:
            namespace, name = parts[4], parts[6]
            self.check(body, "V1Eviction")
            meta = body.get("metadata") or {}
            if (body.get("apiVersion"), body.get("kind")) != ("policy/v1", "Eviction") or (
                meta.get("namespace"),
                meta.get("name"),
            ) != (namespace, name):
                return 400, _status(400, "BadRequest", "eviction body does not name the pod of its path")
            if f"{namespace}/{name}" in self.protected:
                return 429, _status(
                    429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
                )
            before = len(self.pods)
            self.pods = [
                p for p in self.pods if (p["metadata"]["namespace"], p["metadata"]["name"]) != (namespace, name)
            ]
            return (201, _status(201)) if len(self.pods) < before else (404, _status(404, "NotFound", name))
        if path == NODECLAIMS and method == "GET":
            return 200, {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaimList", "items": self.claims}
        if path.startswith(NODECLAIMS + "/") and method == "DELETE":
            name = path.rsplit("/", 1)[-1]
            gone = [c for c in self.claims if c["metadata"]["name"] == name]
            self.claims = [c for c in self.claims if c["metadata"]["name"] != name]
            self.deleted_claims += gone
            if gone and self.karpenter and any(c.get("status", {}).get("nodeName") == self.node_name for c in gone):
                self.node_gone = True
            return (200, _status(200)) if gone else (404, _status(404, "NotFound", name))
        return 404, _status(404, "NotFound", f"{method} {path}")

    def start(self, tls: ssl.SSLContext | None = None) -> str:
        """Serve on the loopback interface (HTTPS with ``tls``'s certificate); the API server's base URL."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _route(self, method: str) -> None:
                url = urlsplit(self.path)
                path, query = unquote(url.path), parse_qs(url.query)
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size)) if size else None
                fake.calls.append((method, path, body))
                fake.tokens.append(self.headers.get("Authorization", ""))
                status, answer = fake.answer(method, path, query, body, self.headers)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._route("GET")

            def do_PATCH(self) -> None:
                self._route("PATCH")

            def do_POST(self) -> None:
                self._route("POST")

            def do_DELETE(self) -> None:
                self._route("DELETE")

        self._server, url = serve(Handler, tls)
        return url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
