"""A GPU node held by CPU pods (issue 49.5), pure: no pod requested ``nvidia.com/gpu`` on it for the whole window.

The DCGM exporter labels each GPU (and MIG slice) with the pod the kubelet allocated it to (its pod-resources
mapping: ``nvidia.com/gpu`` and MIG resources, never processes), and the Prometheus source counts, per minute, the
devices a pod held (``gpu_pods``, :func:`governor.idle.kubernetes.promql.gpu_pod_series`). When that count read 0 for
every minute of the window, whatever runs there is CPU work billed at a GPU node's price: the host's CPU and network
then do not keep the node (its GPUs are what is paid for), and its idle decision says so, with what it costs a day.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from governor.idle.domain import GPU_PODS, Series
from governor.idle.policy import IdlePolicy

if TYPE_CHECKING:
    from governor.policy import Policy


def without_gpu_pods(signals: Mapping[str, Series], policy: IdlePolicy, now: dt.datetime) -> dict[str, Any] | None:
    """The evidence that no pod held a GPU of the node over the whole window (None: a pod did, or the source does not
    say, or it said so for too few minutes to know)."""
    series = signals.get(GPU_PODS)
    if series is None:
        return None
    end = now.timestamp()
    values = series.window(end - policy.window_minutes * 60, end)
    if len(values) < policy.min_samples_fraction * policy.window_minutes or any(v > 0 for v in values):
        return None
    return {"minutes": policy.window_minutes, "samples": len(values)}


def gpu_only(policy: IdlePolicy) -> IdlePolicy:
    """The policy with the host's CPU and network not judged: on a node no GPU pod holds they are CPU pods' work."""
    if policy.cpu_utilization_threshold is None and policy.network_bytes_threshold is None:
        return policy
    return policy.model_copy(update={"cpu_utilization_threshold": None, "network_bytes_threshold": None})


def held_reason(policy: IdlePolicy, host_busy: list[str]) -> str:
    """Why the node is idle though pods run on it, in words."""
    said = (
        f"no pod requested nvidia.com/gpu on this node for {policy.window_minutes} min (DCGM exporter's pod "
        "labels): a GPU node held by CPU pods, billed at its GPU price"
    )
    if host_busy:
        said += f"; its CPU work ({'; '.join(host_busy)}) does not keep it: move those pods to a CPU node"
    return said


def host_work(signals: Mapping[str, Series], policy: IdlePolicy, now: dt.datetime) -> list[str]:
    """The host's CPU and network above the policy's thresholds in the window, in words (the CPU pods' work)."""
    from governor.idle.domain import CPU_UTILIZATION, NETWORK_BYTES

    end = now.timestamp()
    start = end - policy.window_minutes * 60
    said = []
    for signal, threshold, what in (
        (CPU_UTILIZATION, policy.cpu_utilization_threshold, "CPU utilisation reached {:.1f}%"),
        (NETWORK_BYTES, policy.network_bytes_threshold, "network traffic reached {:.0f} bytes"),
    ):
        series = signals.get(signal)
        values = series.window(start, end) if series is not None else ()
        if threshold is not None and values and max(values) >= threshold:
            said.append(what.format(max(values)))
    return said


def gpu_node_price(instance_type: str, policy: Policy) -> dict[str, Any]:
    """The node's on-demand price an hour and a day from the policy's price table (``pricing.prices``; the report
    re-prices at the rate the account pays), and its source; no dollars for a type the table lacks."""
    from governor.domain.costs import PriceBook

    price = PriceBook(policy.pricing).price(instance_type)
    if price.on_demand is None:
        return {"price_source": price.basis}
    return {
        "usd_per_hour": round(price.on_demand, 4),
        "usd_per_day": round(price.on_demand * 24, 2),
        "price_source": price.basis + (f" (as of {price.as_of})" if price.as_of else ""),
    }


def cpu_pods_title(instance: Any, held: Mapping[str, Any], then: str) -> str:
    """The owner's warning about a GPU node held by CPU pods: what it costs, and what happens when."""
    cost = f"${held['usd_per_day']:,.2f} a day at its GPU price" if "usd_per_day" in held else "billed at its GPU price"
    return (
        f"GPU node {instance.id} ({instance.type}) runs no GPU pod ({held['minutes']} min): {cost} for CPU work; "
        f"{then} UTC"
    )
