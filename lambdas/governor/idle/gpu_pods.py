"""GPUs paid for and used by nothing, pure: a GPU node held by CPU pods (issue 49.5), and GPUs held with no process
on them (issue 49.6).

A GPU node held by CPU pods: no pod requested ``nvidia.com/gpu`` on it for the whole window.

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


#: GPU memory in use (MiB) at most which no process has the GPU open. Measured (tests/fixtures): a GPU without any
#: process reads 0 MiB (the DCGM exporter's H100s 1-7; nvidia-smi's A100 and A10G instances), a MIG slice 12-14 MiB
#: (A100 1g, H100 1g.10gb), an A10G with only Xorg 22 MiB; a CUDA context alone takes hundreds (a python process
#: 1005 MiB on the T4). Neither exporter publishes processes: dcgm-exporter's pod labels are the kubelet's allocations,
#: the CloudWatch agent's nvidia_smi input has no process metric; so "no process" is read from the memory floor.
NO_PROCESS_MIB = 32.0


def no_process(evidence: Mapping[str, Any], held_by_pods: int | None) -> dict[str, Any] | None:
    """Evidence that an idle instance's GPUs had nothing on them for the whole window (its busiest device's memory
    in use at most :data:`NO_PROCESS_MIB`), with how many a pod held (``held_by_pods``: a cluster node's allocations);
    None when memory was not read or something was loaded."""
    peak = evidence.get("max_gpu_memory_used_mib")
    if peak is None or peak > NO_PROCESS_MIB:
        return None
    return {"max_gpu_memory_used_mib": peak, "floor_mib": NO_PROCESS_MIB, "held_by_pods": held_by_pods}


def pods_holding(signals: Mapping[str, Series], policy: IdlePolicy, now: dt.datetime) -> int | None:
    """The most devices a pod held at once in the window (None: the source does not say)."""
    series = signals.get(GPU_PODS)
    if series is None:
        return None
    end = now.timestamp()
    values = series.window(end - policy.window_minutes * 60, end)
    return int(max(values)) if values else 0


def no_process_title(held: Mapping[str, Any]) -> str:
    """What the owner's warning adds: held with nothing on the GPUs, and what that costs."""
    pods = held.get("held_by_pods")
    who = f"{pods} GPU(s) allocated to pods with" if pods else "held with"
    cost = f", ${held['usd_per_day']:,.2f} a day" if "usd_per_day" in held else ""
    return f"; {who} no process on them (GPU memory {held['max_gpu_memory_used_mib']:g} MiB, no compute){cost}"


def unused_gpus(
    evidence: dict[str, Any],
    held: dict[str, Any] | None,
    signals: Mapping[str, Series],
    policy: IdlePolicy,
    now: dt.datetime,
) -> list[str]:
    """An idle assessment's evidence of GPUs paid for and used by nothing (a node no GPU pod held, GPUs with no
    process on them), recorded in ``evidence``, and said in words."""
    said = []
    if held is not None:
        evidence["gpu_node_without_gpu_pods"] = held
        said.append(held_reason(policy, held["host_work"]))
    empty = no_process(evidence, pods_holding(signals, policy, now))
    if empty is not None:
        evidence["no_process"] = empty
        said.append(
            f"nothing on the GPUs: memory in use at most {empty['max_gpu_memory_used_mib']:g} MiB for "
            f"{policy.window_minutes} min (no process has a GPU open below {NO_PROCESS_MIB:g} MiB), no compute"
        )
    return said
