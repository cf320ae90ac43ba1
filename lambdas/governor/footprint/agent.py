"""What the CloudWatch agent publishes on each GPU instance for the idle sweep, and the cheapest configuration that
still gives the policy's decision every signal it reads.

CloudWatch bills a custom metric per month for every distinct name and dimension set (prorated by the hour), and the
agent's ``nvidia_gpu`` input publishes each measured field once per GPU (dimensions ``index``, ``name``, ...) and,
with ``aggregation_dimensions [["InstanceId"]]``, once more under InstanceId alone unless ``drop_original_metrics``
names it (aws/amazon-cloudwatch-agent, ``translator/translate/metrics/drop_origin``). The sweep reads only the
InstanceId series (``Maximum``: the busiest GPU), so the per-GPU series are paid for and never read. The agent sends
one ``PutMetricData`` request per flush (``force_flush_interval``, 60 s by default), billed as an API request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from governor.domain.costs import FleetSignals

#: The agent's one-minute collection: the sweep judges one-minute samples.
COLLECTION_SECONDS = 60
DEFAULT_FLUSH_SECONDS = 60
MINUTES_PER_MONTH = 730 * 60


def fields_of(config: Mapping[str, Any]) -> list[str]:
    """The ``nvidia_gpu`` fields a configuration measures (a name, or ``{"name": ...}``)."""
    section = config.get("metrics", {}).get("metrics_collected", {}).get("nvidia_gpu", {})
    return [m if isinstance(m, str) else str(m.get("name")) for m in section.get("measurement", [])]


def metrics_per_instance(config: Mapping[str, Any], gpus: float) -> float:
    """Custom metrics one instance with ``gpus`` GPUs publishes under ``config``: per field, one series per GPU
    unless dropped, plus one per aggregation."""
    metrics = config.get("metrics", {})
    section = metrics.get("metrics_collected", {}).get("nvidia_gpu", {})
    dropped = set(section.get("drop_original_metrics", []))
    rollups = len(metrics.get("aggregation_dimensions", []))
    total = 0.0
    for name in fields_of(config):
        total += (0.0 if "*" in dropped or name in dropped else gpus) + rollups
    return total


def requests_per_instance(config: Mapping[str, Any], hours: float = 730.0) -> float:
    """``PutMetricData`` requests one instance's agent sends in ``hours``: one per flush."""
    flush = float(config.get("metrics", {}).get("force_flush_interval", DEFAULT_FLUSH_SECONDS))
    return hours * 3600 / max(flush, 1.0)


def signals(policy: Any) -> FleetSignals:
    """What ``policy``'s decisions read, as the capability reading them declares it."""
    from governor.registry import REGISTRY

    return REGISTRY.fleet_signals(policy)


def needed_fields(policy: Any) -> list[str]:
    """The agent fields the decisions under ``policy`` read."""
    return list(signals(policy).agent_fields)


#: Minutes kept free under the oldest sample the decisions accept, for CloudWatch's own ingestion delay.
FRESHNESS_MARGIN_MINUTES = 2


def cheapest_flush_seconds(policy: Any) -> int:
    """The longest flush that keeps the newest sample fresh enough for the sweep: a sample waits at most a collection
    interval plus a flush, and the oldest sample the decisions accept less a margin for ingestion is the most it may
    be."""
    allowed = (signals(policy).max_sample_age_minutes - FRESHNESS_MARGIN_MINUTES) * 60 - COLLECTION_SECONDS
    return int(max(DEFAULT_FLUSH_SECONDS, math.floor(allowed / 60) * 60))


def cheapest_config(policy: Any) -> dict[str, Any]:
    """The agent configuration publishing only what ``policy``'s decision reads: the needed fields, aggregated by
    InstanceId, originals dropped, flushed as rarely as freshness allows."""
    fields = needed_fields(policy)
    return {
        "agent": {"metrics_collection_interval": COLLECTION_SECONDS, "run_as_user": "cwagent"},
        "metrics": {
            "namespace": "CWAgent",
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            "aggregation_dimensions": [["InstanceId"]],
            "force_flush_interval": cheapest_flush_seconds(policy),
            "metrics_collected": {
                "nvidia_gpu": {
                    "measurement": fields,
                    "metrics_collection_interval": COLLECTION_SECONDS,
                    "drop_original_metrics": fields,
                }
            },
        },
    }
