"""What the CloudWatch agent publishes from ``nvidia-smi -q -x``: its parser's rules, for tests on its real samples.

The agent's ``nvidia_smi`` input (aws/amazon-cloudwatch-agent, ``plugins/inputs/nvidia_smi``) reads each ``<gpu>``
into fields tagged ``index`` (the GPU's position), ``name``, ``arch`` (schema v12), ``uuid``, ``pstate``; a value of
``N/A`` (or empty) is not set at all (``common/setters.go``), so a GPU in MIG mode publishes no ``utilization_gpu``.
MIG slices go to a separate ``nvidia_smi_mig`` measurement holding memory only, which the ``nvidia_gpu`` section
(the measurements it lists) does not publish. The ``nvidia_gpu`` section publishes the listed fields as
``nvidia_smi_<field>`` in the ``CWAgent`` namespace with the tags as dimensions (``uuid`` and ``pstate`` dropped:
the agent publishes ``index``, ``name``, ``arch`` and ``host``), plus ``append_dimensions`` (InstanceId), and with
``aggregation_dimensions [["InstanceId"]]`` every sample once more under InstanceId alone; a field the section's
``drop_original_metrics`` names is published under InstanceId only (``translator/translate/metrics/drop_origin``).
"""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: measurement field -> the element path the agent reads it from (schema v11 and v12; the later wins when both set).
FIELDS: dict[str, tuple[str, ...]] = {
    "utilization_gpu": ("utilization/gpu_util",),
    "memory_used": ("fb_memory_usage/used",),
    "memory_total": ("fb_memory_usage/total",),
    "temperature_gpu": ("temperature/gpu_temp",),
    "power_draw": (
        "power_readings/power_draw",
        "power_readings/instant_power_draw",
        "gpu_power_readings/power_draw",
        "gpu_power_readings/instant_power_draw",
    ),
}
INTEGER = frozenset({"utilization_gpu", "memory_used", "memory_total", "temperature_gpu"})


@dataclass(frozen=True)
class GpuReading:
    """One ``<gpu>`` as the agent reads it: its tags and the fields it sets (N/A ones absent)."""

    index: int
    name: str
    arch: str | None
    fields: dict[str, float]
    mig_memory_used: list[float] = field(default_factory=list)


def _value(text: str | None, integer: bool) -> float | None:
    """The agent's ``SetIfUsed``: the first word; ``N/A`` or empty is not set; ints must parse as ints."""
    words = (text or "").split()
    if not words or words[0] == "N/A":
        return None
    try:
        return float(int(words[0])) if integer else float(words[0])
    except ValueError:
        return None


def parse(path: Path) -> list[GpuReading]:
    """Every GPU of one ``nvidia-smi -q -x`` file, with the fields the agent would publish."""
    text = path.read_text(encoding="utf-8")
    v12 = "nvsmi_device_v12.dtd" in text  # the agent's schema_v11 parser sets no arch tag; schema_v12's does
    root = ET.fromstring(text)  # noqa: S314 - a fixture, not input from a user
    readings: list[GpuReading] = []
    for index, gpu in enumerate(root.findall("gpu")):
        found: dict[str, float] = {}
        for name, paths in FIELDS.items():
            for element in paths:
                value = _value(gpu.findtext(element), name in INTEGER)
                if value is not None:
                    found[name] = value
        mig = [_value(d.findtext("fb_memory_usage/used"), True) for d in gpu.findall("mig_devices/mig_device")]
        readings.append(
            GpuReading(
                index=index,
                name=(gpu.findtext("product_name") or "").strip(),
                arch=((gpu.findtext("product_architecture") or "").strip() or None) if v12 else None,
                fields=found,
                mig_memory_used=[m for m in mig if m is not None],
            )
        )
    return readings


def metric_data(
    readings: list[GpuReading],
    instance_id: str,
    at: dt.datetime,
    *,
    host: str = "ip-10-0-0-1.ec2.internal",
    measurements: tuple[str, ...] = ("utilization_gpu", "memory_used", "memory_total", "temperature_gpu", "power_draw"),
    config: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The ``PutMetricData`` entries of one collection at ``at``: per GPU with its dimensions, and each once more
    under InstanceId alone (the InstanceId aggregation). With an agent ``config``, its ``nvidia_gpu`` section decides
    the fields and which are published under InstanceId alone (``drop_original_metrics``)."""
    dropped: set[str] = set()
    if config is not None:
        section = config["metrics"]["metrics_collected"]["nvidia_gpu"]
        measurements = tuple(m if isinstance(m, str) else m["name"] for m in section["measurement"])
        dropped = set(section.get("drop_original_metrics", []))
    data: list[dict[str, Any]] = []
    for reading in readings:
        dimensions = [
            {"Name": "InstanceId", "Value": instance_id},
            {"Name": "index", "Value": str(reading.index)},
            {"Name": "name", "Value": reading.name},
            {"Name": "host", "Value": host},
        ]
        if reading.arch:
            dimensions.append({"Name": "arch", "Value": reading.arch})
        for measurement in measurements:
            if measurement not in reading.fields:
                continue  # N/A: the agent publishes nothing for it
            original = "*" not in dropped and measurement not in dropped
            for dims in (dimensions, dimensions[:1]) if original else (dimensions[:1],):
                data.append(
                    {
                        "MetricName": f"nvidia_smi_{measurement}",
                        "Dimensions": dims,
                        "Timestamp": at,
                        "Value": reading.fields[measurement],
                    }
                )
    return data
