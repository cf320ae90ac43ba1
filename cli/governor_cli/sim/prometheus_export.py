"""``governor backtest --metrics`` on what a platform team can export from Prometheus: a range query's JSON answer
(``/api/v1/query_range``, one per DCGM field, as a list or an object keyed by field; each series named by its
``__name__`` label or by the key), or text exposition with timestamps (``/federate``, or scrapes saved one after
another). Series are read by the same code as the sweep's Prometheus source (``governor.idle.kubernetes.promql``):
per GPU and MIG slice, with the pods that held them. A node is named by its instance id when ``kube_node_info`` is
in the export or the node name is the id, else by its node name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from governor.idle.domain import Series
from governor.idle.kubernetes.promql import (
    NODE_INFO,
    SIGNAL_OF_FIELD,
    NodeReadings,
    instance_of_node,
    nodes_to_instances,
    read_matrix,
)
from governor_cli.sim.metrics_file import MetricsFileError

NODE_LABELS = ("Hostname", "hostname", "node", "kubernetes_node")


def is_prometheus_export(path: Path) -> bool:
    """A JSON document, or text whose first sample line names a DCGM field."""
    with path.open("rb") as handle:
        head = handle.read(4096).lstrip()
    if head[:1] in (b"{", b"["):
        return True
    return any(head.startswith(name.encode()) or f"\n{name}".encode() in head for name in SIGNAL_OF_FIELD) or (
        head.startswith(b"# HELP DCGM_") or head.startswith(b"# TYPE DCGM_")
    )


def _answers(document: Any, where: str) -> Iterable[tuple[str | None, Mapping[str, Any]]]:
    if isinstance(document, list):
        for item in document:
            yield from _answers(item, where)
    elif isinstance(document, Mapping) and "data" in document:
        if document.get("status") != "success":
            raise MetricsFileError(f"{where}: a Prometheus answer with status {document.get('status')!r}")
        for item in (document.get("data") or {}).get("result") or []:
            yield None, item
    elif isinstance(document, Mapping):
        for key, answer in document.items():
            for name, item in _answers(answer, where):
                yield name or str(key), item
    else:
        raise MetricsFileError(f"{where}: not a Prometheus range-query answer (expected data.result)")


def _node_label(series: Iterable[Mapping[str, Any]]) -> str:
    for item in series:
        for label in NODE_LABELS:
            if item.get("metric", {}).get(label):
                return label
    return "Hostname"


def read_export(path: Path) -> tuple[dict[str, dict[str, Series]], dict[str, NodeReadings]]:
    """Signals per node (``signal@device``) for the replay, and the readings (with pods) for GPU-hours."""
    where = str(path)
    text = path.read_text(encoding="utf-8-sig")
    by_field: dict[str, list[dict[str, Any]]] = {}
    info: list[dict[str, Any]] = []
    if text.lstrip()[:1] in ("{", "["):
        try:
            document = json.loads(text)
        except ValueError as error:
            raise MetricsFileError(f"{where}: not valid JSON ({error})") from None
        for name, item in _answers(document, where):
            field = str(item.get("metric", {}).get("__name__") or name or "")
            if field == NODE_INFO:
                info.append(dict(item))
            elif field in SIGNAL_OF_FIELD:
                by_field.setdefault(field, []).append(dict(item))
    else:
        by_field, info = _exposition(text, where)
    if not by_field:
        known_fields = ", ".join(sorted(SIGNAL_OF_FIELD))
        raise MetricsFileError(f"{where}: no DCGM exporter series ({known_fields})")
    known = nodes_to_instances(info)
    series = [item for items in by_field.values() for item in items]
    label = _node_label(series)
    for item in series:  # a node without kube_node_info and without an instance-id name keeps its node name
        node = str(item.get("metric", {}).get(label, ""))
        if node and instance_of_node(node, known) is None:
            known[node] = node
    answers: dict[str, list[dict[str, Any]]] = {}
    for field, items in by_field.items():
        answers.setdefault(SIGNAL_OF_FIELD[field], []).extend(items)
    readings, _ = read_matrix(answers, label, known)
    return {node: dict(r.series) for node, r in readings.items()}, readings


def _exposition(text: str, where: str) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    from prometheus_client.parser import text_string_to_metric_families

    grouped: dict[tuple[str, tuple[tuple[str, str], ...]], list[list[Any]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name not in SIGNAL_OF_FIELD and sample.name != NODE_INFO:
                    continue
                if sample.timestamp is None:
                    raise MetricsFileError(
                        f"{where}: sample {sample.name} has no timestamp; export with timestamps (/federate) so "
                        "each scrape has its time"
                    )
                key = (sample.name, tuple(sorted(sample.labels.items())))
                grouped.setdefault(key, []).append([float(sample.timestamp), str(sample.value)])
    except ValueError as error:
        raise MetricsFileError(f"{where}: not Prometheus text exposition ({error})") from None
    by_field: dict[str, list[dict[str, Any]]] = {}
    info: list[dict[str, Any]] = []
    for (name, labels), values in grouped.items():
        item = {"metric": dict(labels), "values": sorted(values)}
        (info if name == NODE_INFO else by_field.setdefault(name, [])).append(item)
    return by_field, info
