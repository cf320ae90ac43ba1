"""The energy and emissions of idle GPU time: kWh and kg CO2e, per GPU model and region, with where each figure
comes from (defined once in docs/reports.md, "GPU energy").

idle kWh = idle GPU-hours x the model's idle draw (W) / 1000 x the data centre's PUE
idle CO2e = idle kWh x the region's grid emissions factor

The idle draw is the measured one of :data:`governor.idle.power.MEASURED` (nvidia-smi of idle GPUs, the table the
idle sweep judges power with) when there is one, else Cloud Carbon Footprint's per-GPU minimum; the busy draw is
CCF's maximum (at 100 % utilisation), shown beside it for scale. AWS's PUE and the grid factors are CCF's too. A
model neither source knows counts its idle GPU-hours as "no draw known": never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from governor.idle.power import MEASURED, gpu_model

#: Cloud Carbon Footprint (Apache-2.0), repository cloud-carbon-footprint/cloud-carbon-footprint at commit
#: b7a049c7d25c0022919ab9010199dd9e77aa4577: packages/aws/src/domain/AwsFootprintEstimationConstants.ts
#: (MIN_WATTS_BY_COMPUTE_PROCESSOR, MAX_WATTS_BY_COMPUTE_PROCESSOR, PUE_AVG, AWS_EMISSIONS_FACTORS_METRIC_TON_PER_KWH)
#: and packages/core/src/FootprintEstimationConstants.ts (US_NERC_REGIONS_EMISSIONS_FACTORS).
CCF = "cloud-carbon-footprint@b7a049c AwsFootprintEstimationConstants.ts"
#: CCF's per-GPU draw in watts at 0 % and 100 % utilisation, under the names nvidia-smi gives the models
#: (``governor.idle.power.FAMILY_GPU``); CCF has one Tesla V100 and one Tesla A100 figure for every variant.
CCF_GPU_WATTS: dict[str, tuple[float, float]] = {
    "NVIDIA A10G": (18.0, 153.0),
    "Tesla T4": (8.0, 71.0),
    "Tesla V100-SXM2-16GB": (35.0, 306.0),
    "Tesla V100-SXM2-32GB": (35.0, 306.0),
    "NVIDIA A100-SXM4-40GB": (46.0, 407.0),
    "NVIDIA A100-SXM4-80GB": (46.0, 407.0),
}
#: CCF's power usage effectiveness for AWS data centres.
AWS_PUE = 1.135
#: CCF's grid emissions factors, kg CO2e per kWh (its metric tons per kWh x 1,000); US regions by NERC region
#: (us-east-1 SERC, us-east-2 RFC, us-west-1/2 WECC). "unknown" is CCF's average over its regions.
GRID_KG_PER_KWH: dict[str, float] = {
    "us-east-1": 0.379069,
    "us-east-2": 0.410608,
    "us-west-1": 0.322167,
    "us-west-2": 0.322167,
    "af-south-1": 0.9006,
    "ap-east-1": 0.71,
    "ap-south-1": 0.7082,
    "ap-northeast-1": 0.4658,
    "ap-northeast-2": 0.4156,
    "ap-northeast-3": 0.4658,
    "ap-southeast-1": 0.408,
    "ap-southeast-2": 0.76,
    "ap-southeast-3": 0.7177,
    "ca-central-1": 0.12,
    "eu-central-1": 0.311,
    "eu-west-1": 0.2786,
    "eu-west-2": 0.225,
    "eu-west-3": 0.0511,
    "eu-south-1": 0.2134,
    "eu-north-1": 0.0088,
    "me-south-1": 0.5059,
    "me-central-1": 0.4041,
    "sa-east-1": 0.0617,
    "unknown": 0.39278188,
}


@dataclass(frozen=True)
class GpuDraw:
    """One GPU model's draw when idle and when busy, in watts, and where the idle figure comes from."""

    model: str
    idle_watts: float
    busy_watts: float | None
    source: str


def draw_of(model: str) -> GpuDraw | None:
    """The measured idle draw (nvidia-smi) when there is one, else CCF's minimum; CCF's maximum as the busy draw."""
    ccf = CCF_GPU_WATTS.get(model)
    measured = MEASURED.get(model)
    if measured is not None:
        return GpuDraw(model, measured.idle_watts, ccf[1] if ccf else None, f"measured: {measured.source}")
    if ccf is not None:
        return GpuDraw(model, ccf[0], ccf[1], CCF)
    return None


def source_label(draw: GpuDraw | None) -> str:
    """Where a model's idle draw comes from, in words short enough for a table cell (the full source is ``source``)."""
    if draw is None:
        return "no draw known: not counted"
    if draw.source.startswith("measured"):
        return "measured (nvidia-smi of an idle GPU)"
    return "Cloud Carbon Footprint"


def grid_factor(region: str | None) -> float:
    """kg CO2e per kWh of the region's grid (CCF's average for a region it does not list)."""
    return GRID_KG_PER_KWH.get(region or "unknown", GRID_KG_PER_KWH["unknown"])


@dataclass(frozen=True)
class IdleEnergy:
    """The energy and emissions of a period's idle GPU time, by model."""

    kwh: float
    co2e_kg: float
    #: model -> (idle GPU-hours, kWh); models without a known draw have kWh None.
    by_model: dict[str, tuple[float, float | None]]
    #: idle GPU-hours on models with no known draw (not in kWh).
    unknown_gpu_hours: float
    #: instance id -> (kWh, kg CO2e), so a team's digest adds up its own instances.
    by_instance: dict[str, tuple[float, float]]


def idle_energy(rows: Iterable[tuple[str, str, float, str | None]]) -> IdleEnergy:
    """``rows``: (instance id, instance type, idle GPU-hours, region) per instance."""
    kwh = co2e = unknown = 0.0
    by_model: dict[str, tuple[float, float | None]] = {}
    by_instance: dict[str, tuple[float, float]] = {}
    for instance_id, instance_type, gpu_hours, region in rows:
        model = gpu_model(instance_type) or f"unknown GPU ({instance_type})"
        draw = draw_of(model)
        hours, energy = by_model.get(model, (0.0, 0.0 if draw else None))
        if draw is None:
            unknown += gpu_hours
            by_model[model] = (hours + gpu_hours, None)
            continue
        used = gpu_hours * draw.idle_watts / 1000 * AWS_PUE
        kwh += used
        co2e += used * grid_factor(region)
        by_model[model] = (hours + gpu_hours, (energy or 0.0) + used)
        by_instance[instance_id] = (round(used, 3), round(used * grid_factor(region), 3))
    return IdleEnergy(round(kwh, 2), round(co2e, 2), by_model, round(unknown, 2), by_instance)
