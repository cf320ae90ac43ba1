"""What NVIDIA's DCGM exporter serves on ``/metrics``, rendered from its own captured data by its own template's
rules, and a Prometheus-compatible query server on the loopback interface that answers the governor's PromQL.

The capture (``tests/fixtures/dcgm_exporter/h100-mig-metrics.json``, an 8 x H100 80GB HBM3 node with GPU 0 split
into two 1g.10gb MIG instances, 11 and 13) and the kubelet pod-resources answer (``pod-resources.json``: pod
``ollama-76f687f4cd-xcvvp`` of namespace ``testing`` holding GPU 0's MIG device) are the exporter's own test data
(``internal/pkg/transformation/kubernetes_mig_test.go``). :func:`exposition` writes them the way
``internal/pkg/rendermetrics/render_metrics.go`` does (label order ``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, then ``GPU_I_PROFILE``/``GPU_I_ID`` on a MIG slice, ``hostname``, then the pod mapper's attributes
``container``, ``namespace``, ``pod``, sorted as Go templates range over maps). The capture holds memory only
(``DCGM_FI_DEV_FB_USED``/``FB_FREE``); utilisation, engine activity and power are added per test with the same
labels, and say so.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "dcgm_exporter"
HELP = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
}


@dataclass(frozen=True)
class Device:
    """One GPU or MIG slice as the exporter labels it."""

    gpu: str
    uuid: str
    pci_bus_id: str
    device: str
    model: str
    mig_profile: str = ""
    gpu_instance_id: str = ""

    @property
    def key(self) -> str:
        """The governor's device key (``governor.idle.kubernetes.promql.device_of``)."""
        return f"{self.gpu}/mig{self.gpu_instance_id}" if self.gpu_instance_id else self.gpu


@dataclass
class Capture:
    """The exporter's captured node: its devices, the values it read, and which pod held which device."""

    devices: list[Device]
    values: dict[str, dict[Device, float]]
    pods: dict[str, dict[str, str]] = field(default_factory=dict)  # UUID or MIG-UUID -> {namespace, pod, container}


def load_capture(folder: Path = FIXTURES) -> Capture:
    raw = json.loads((folder / "h100-mig-metrics.json").read_text())["metrics"]
    devices: dict[tuple[str, str], Device] = {}
    values: dict[str, dict[Device, float]] = {}
    for name, rows in raw.items():
        for row in rows:
            device = Device(
                row["gpu"],
                row["gpu_uuid"],
                row["pci_bus_id"],
                row["gpu_device"],
                row["gpu_model"],
                row.get("mig_profile", ""),
                row.get("gpu_instance_id", ""),
            )
            devices.setdefault((device.gpu, device.gpu_instance_id), device)
            values.setdefault(name, {})[device] = float(row["value"])
    pods: dict[str, dict[str, str]] = {}
    answer = json.loads((folder / "pod-resources.json").read_text())
    for pod in answer["pod_resources"]:
        for container in pod["containers"]:
            for assigned in container["devices"]:
                for device_id in assigned["device_ids"]:
                    pods[device_id] = {
                        "namespace": pod["namespace"],
                        "pod": pod["name"],
                        "container": container["name"],
                    }
    return Capture(sorted(devices.values(), key=lambda d: (int(d.gpu), d.gpu_instance_id)), values, pods)


def holder(capture: Capture, device: Device) -> dict[str, str]:
    """The pod mapper's attributes for a device: a MIG slice by its ``MIG-<parent UUID>`` id, a GPU by its UUID."""
    return capture.pods.get(f"MIG-{device.uuid}" if device.gpu_instance_id else device.uuid, {})


def exposition(
    capture: Capture,
    hostname: str,
    values: Mapping[str, Mapping[str, float]],
    *,
    label: str = "hostname",
    pods: bool = True,
) -> str:
    """``/metrics`` text by the exporter's template: ``values`` maps field -> device key -> value (a device left out
    publishes no sample for that field, as the exporter does for a blank reading)."""
    lines: list[str] = []
    for name in sorted(values):
        kind, text = HELP[name]
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        for device in capture.devices:
            if device.key not in values[name]:
                continue
            labels = (
                f'gpu="{device.gpu}",UUID="{device.uuid}",pci_bus_id="{device.pci_bus_id}",'
                f'device="{device.device}",modelName="{device.model}"'
            )
            if device.gpu_instance_id:
                labels += f',GPU_I_PROFILE="{device.mig_profile}",GPU_I_ID="{device.gpu_instance_id}"'
            labels += f',{label}="{hostname}"'
            attributes = holder(capture, device) if pods else {}
            for key in sorted(attributes):
                labels += f',{key}="{attributes[key]}"'
            lines.append(f"{name}{{{labels}}} {_number(values[name][device.key])}")
    return "\n".join(lines) + "\n"


def captured(capture: Capture, name: str) -> dict[str, float]:
    """The capture's own values of a field, by device key."""
    return {device.key: value for device, value in capture.values.get(name, {}).items()}


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample, read by the Prometheus project's own parser (``prometheus_client``)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def serve(
    handler: Callable[..., BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None
) -> tuple[ThreadingHTTPServer, str]:
    """An HTTP server on a free loopback port, serving in a daemon thread; its base URL. ``tls``: serve HTTPS with
    this server context (its certificate), as an EKS cluster's API endpoint does."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"


LOOKBACK = 300.0
_GPU_QUERY = re.compile(r"^max by \(([^)]*)\) \(([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}\)$")
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=|!=|=~|!~)\s*"((?:[^"\\]|\\.)*)"')


@dataclass
class PrometheusServer:
    """A Prometheus-compatible HTTP API on 127.0.0.1 holding scraped samples and answering exactly the PromQL the
    governor sends (``max by (labels) (metric{matchers})``) on ``/api/v1/query`` and ``/api/v1/query_range``, also
    under an AMP workspace prefix ``/workspaces/<id>``. ``require_sigv4``: refuse requests without a SigV4
    ``Authorization`` for service ``aps`` (403, as AMP does). Every request's path and query is kept in ``requests``.
    """

    require_sigv4: bool = False
    samples: list[tuple[float, str, dict[str, str], float]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], dict[str, str]]] = field(default_factory=list)
    fail_with: int | None = None

    def scrape(self, at: float, text: str, extra: Mapping[str, str] | None = None) -> None:
        """Store one ``/metrics`` text as scraped at ``at`` (epoch seconds), with the scrape's target labels."""
        for name, labels, value in parse_exposition(text):
            self.samples.append((at, name, {**labels, **(extra or {})}, value))

    def add(self, at: float, name: str, labels: Mapping[str, str], value: float) -> None:
        self.samples.append((at, name, dict(labels), value))

    def start(self) -> str:
        self._server, url = serve(_handler(self))
        return url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def evaluate(self, promql: str, times: Iterable[float]) -> list[dict[str, Any]]:
        match = _GPU_QUERY.match(promql.strip())
        if match is None:
            raise ValueError(f"unsupported PromQL: {promql}")
        by = [label.strip() for label in match.group(1).split(",") if label.strip()]
        name, matchers = match.group(2), _MATCHER.findall(match.group(3))
        found: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
        for at, sample_name, labels, value in self.samples:
            if sample_name != name or not all(_matches(labels.get(k, ""), op, v) for k, op, v in matchers):
                continue
            key = tuple((label, labels[label]) for label in by if labels.get(label))
            slot = found.setdefault(key, {})
            slot[at] = max(slot.get(at, value), value)  # max by (...) over series that share the kept labels
        series: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
        for key, by_time in found.items():
            scraped = sorted(by_time)
            for step in sorted(times):
                # What a range query sees at each step: the newest sample within Prometheus' 5-minute lookback.
                seen = [at for at in scraped if step - LOOKBACK < at <= step]
                if seen:
                    series.setdefault(key, {})[step] = by_time[seen[-1]]
        return [
            {"metric": dict(key), "values": [[t, _number(v)] for t, v in sorted(points.items())]}
            for key, points in series.items()
        ]


def _matches(value: str, op: str, wanted: str) -> bool:
    if op == "=":
        return value == wanted
    if op == "!=":
        return value != wanted
    hit = re.fullmatch(wanted, value) is not None
    return hit if op == "=~" else not hit


def _handler(server: PrometheusServer) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            params = {k: v[0] for k, v in parse_qs(url.query).items()}
            server.requests.append((url.path, params, dict(self.headers)))
            path = re.sub(r"^/workspaces/[^/]+", "", url.path)
            auth = self.headers.get("Authorization", "")
            if server.require_sigv4 and not re.search(
                r"^AWS4-HMAC-SHA256 Credential=[^/]+/\d{8}/[a-z0-9-]+/aps/aws4_request", auth
            ):
                return self._answer(403, {"message": "Missing Authentication Token"})
            if server.fail_with:
                return self._answer(server.fail_with, {"status": "error", "errorType": "unavailable", "error": "down"})
            try:
                if path == "/api/v1/query_range":
                    start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
                    times = [start + i * step for i in range(int((end - start) // step) + 1)]
                    result = server.evaluate(params["query"], times)
                    return self._answer(200, {"status": "success", "data": {"resultType": "matrix", "result": result}})
                if path == "/api/v1/query":
                    at = float(params["time"])
                    result = [
                        {"metric": r["metric"], "value": r["values"][-1]}
                        for r in server.evaluate(params["query"], [at])
                    ]
                    return self._answer(200, {"status": "success", "data": {"resultType": "vector", "result": result}})
            except (KeyError, ValueError) as error:
                return self._answer(400, {"status": "error", "errorType": "bad_data", "error": str(error)})
            return self._answer(404, {"status": "error", "errorType": "not_found", "error": url.path})

        def _answer(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
