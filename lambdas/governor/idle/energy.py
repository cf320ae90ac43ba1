"""The energy and emissions of idle GPU time: kWh and kg CO2e, per GPU model and region, with where each figure
comes from (defined once in docs/reports.md, "GPU energy").

idle kWh = idle GPU-hours x the model's idle draw (W) / 1000 x the data centre's PUE
idle CO2e = idle kWh x the region's grid emissions factor

The idle draw of a model, in order: the measured one of :data:`governor.idle.power.MEASURED` (nvidia-smi of idle
GPUs from the CloudWatch agent's test data, the table the idle sweep judges power with); else :data:`CAPTURED`,
public ``nvidia-smi`` captures of idle GPUs (0 % utilisation, no memory used); else Cloud Carbon Footprint's per-GPU
minimum. The busy draw is CCF's maximum (at 100 % utilisation) when CCF has the model, else the board power NVIDIA's
datasheet gives, shown beside it for scale. AWS's PUE and the grid factors are CCF's too. A model none of them knows
counts its idle GPU-hours as left out, with the reason (:data:`LEFT_OUT`), and the report says how much: never
guessed, never silent. The model of an instance type is :func:`governor.domain.gpus.facts_of`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from governor.domain import gpus
from governor.idle.power import MEASURED

#: Cloud Carbon Footprint (Apache-2.0), repository cloud-carbon-footprint/cloud-carbon-footprint at commit
#: b7a049c7d25c0022919ab9010199dd9e77aa4577: packages/aws/src/domain/AwsFootprintEstimationConstants.ts
#: (MIN_WATTS_BY_COMPUTE_PROCESSOR, MAX_WATTS_BY_COMPUTE_PROCESSOR, PUE_AVG, AWS_EMISSIONS_FACTORS_METRIC_TON_PER_KWH)
#: and packages/core/src/FootprintEstimationConstants.ts (US_NERC_REGIONS_EMISSIONS_FACTORS).
CCF = "cloud-carbon-footprint@b7a049c AwsFootprintEstimationConstants.ts"
#: CCF's per-GPU draw in watts at 0 % and 100 % utilisation, under the names nvidia-smi gives the models
#: (``governor.domain.gpus.SMI_NAMES``); CCF has one Tesla V100 and one Tesla A100 figure for every variant.
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
PUE_SOURCE = "Cloud Carbon Footprint, AWS average"
GRID_SOURCE = "Cloud Carbon Footprint, US regions by NERC region"

#: Idle draw in watts from public ``nvidia-smi`` captures of idle GPUs (utilisation 0 %, 0 MiB used), the busy draw
#: (board power: the limit those captures show, which NVIDIA's datasheets give as the maximum), and where they come
#: from. Idle draw depends on the power state: the state of each capture is named, and the figure is the typical one of
#: the captures read (their range in the source).
CAPTURED: dict[str, tuple[float, float, str]] = {
    "NVIDIA H100 80GB HBM3": (
        70.0,
        700.0,
        "nvidia-smi of 8 idle H100 SXM (P0, 0 %, 0 MiB: 69-72 W of 700 W), "
        "nebius/nebius-architect-solution-library kubernetes/terraform/kuberay/README.md; "
        "700 W: NVIDIA H100 datasheet (SXM)",
    ),
    "NVIDIA H200": (
        78.0,
        700.0,
        "public nvidia-smi captures of idle H200 SXM on GitHub (P0, 0 %, 0 MiB: 73, 78 and 120 W of 700 W; median); "
        "700 W: NVIDIA H200 datasheet (SXM)",
    ),
    "NVIDIA B200": (
        140.0,
        1000.0,
        "public nvidia-smi captures of idle B200 on GitHub (P0, 0 %, 0 MiB: 136-144 W of 1,000 W); "
        "1,000 W: NVIDIA HGX B200 datasheet",
    ),
    "NVIDIA L4": (
        16.0,
        72.0,
        "public nvidia-smi captures of idle L4 on GitHub (P8, 0 %, 0 MiB: 11-16 W of 72 W; one holding a loaded "
        "model sits in P0 at ~35 W, so this is a floor); 72 W: NVIDIA L4 datasheet",
    ),
    "NVIDIA L40S": (
        36.0,
        350.0,
        "public nvidia-smi captures of idle L40S on GitHub (P8, 0 %, 0-1 MiB: 31-36 W of 350 W); "
        "350 W: NVIDIA L40S datasheet",
    ),
}

#: Accelerators the GPU table knows whose idle draw has no public source the governor could cite: their idle
#: GPU-hours are left out of the kWh, and the report names them with this reason.
NO_SOURCE = "no public measurement of its idle draw"
LEFT_OUT: dict[str, str] = {
    "NVIDIA GB200": NO_SOURCE,
    "NVIDIA B300": NO_SOURCE,
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": NO_SOURCE,
    "NVIDIA RTX PRO 4500 Blackwell Server Edition": NO_SOURCE,
    "NVIDIA T4G": NO_SOURCE,
    "AWS Trainium": "AWS publishes no per-chip power for Trainium",
    "AWS Trainium2": "AWS publishes no per-chip power for Trainium2",
    "AWS Inferentia": "AWS publishes no per-chip power for Inferentia",
    "AWS Inferentia2": "AWS publishes no per-chip power for Inferentia2",
    "Habana Gaudi HL-205": NO_SOURCE,
    "AMD Radeon Pro V520": NO_SOURCE,
    "Qualcomm AI100": NO_SOURCE,
}
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
    """The model's idle draw (measured, else a public capture, else CCF's minimum) and busy draw (CCF's maximum,
    else the datasheet's board power); None when no source has the model."""
    ccf = CCF_GPU_WATTS.get(model)
    captured = CAPTURED.get(model)
    busy = ccf[1] if ccf else (captured[1] if captured else None)
    measured = MEASURED.get(model)
    if measured is not None:
        return GpuDraw(model, measured.idle_watts, busy, f"measured: {measured.source}")
    if captured is not None:
        return GpuDraw(model, captured[0], busy, f"captured: {captured[2]}")
    if ccf is not None:
        return GpuDraw(model, ccf[0], ccf[1], CCF)
    return None


def left_out_reason(model: str) -> str:
    """Why a model's idle GPU-hours are not in the kWh."""
    if model.startswith("unknown GPU"):
        return "the instance type is not in the GPU table"
    return LEFT_OUT.get(model, NO_SOURCE)


def source_label(draw: GpuDraw | None) -> str:
    """Where a model's idle draw comes from, in words short enough for a table cell (the full source is ``source``)."""
    if draw is None:
        return "no draw known: not counted"
    if draw.source.startswith("measured"):
        return "measured (nvidia-smi of an idle GPU)"
    if draw.source.startswith("captured"):
        return "public nvidia-smi captures of idle GPUs"
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
    #: every idle GPU-hour, counted or not: the share covered is (gpu_hours - unknown_gpu_hours) / gpu_hours.
    gpu_hours: float = 0.0
    #: model left out -> why (no public measurement, not in the GPU table).
    left_out: dict[str, str] = field(default_factory=dict)
    #: instance id -> its idle GPU-hours, counted or not, and -> the model of those not counted (a team's share).
    hours_by_instance: dict[str, float] = field(default_factory=dict)
    left_out_by_instance: dict[str, str] = field(default_factory=dict)


def idle_energy(rows: Iterable[tuple[str, str, float, str | None]]) -> IdleEnergy:
    """``rows``: (instance id, instance type, idle GPU-hours, region) per instance."""
    kwh = co2e = unknown = total = 0.0
    by_model: dict[str, tuple[float, float | None]] = {}
    by_instance: dict[str, tuple[float, float]] = {}
    left_out: dict[str, str] = {}
    hours_by_instance: dict[str, float] = {}
    left_out_by_instance: dict[str, str] = {}
    for instance_id, instance_type, gpu_hours, region in rows:
        found = gpus.model_of(instance_type)
        model = found[1] if found is not None else f"unknown GPU ({instance_type})"
        draw = draw_of(model)
        hours, energy = by_model.get(model, (0.0, 0.0 if draw else None))
        total += gpu_hours
        hours_by_instance[instance_id] = round(hours_by_instance.get(instance_id, 0.0) + gpu_hours, 3)
        if draw is None:
            unknown += gpu_hours
            by_model[model] = (hours + gpu_hours, None)
            left_out_by_instance[instance_id] = model
            left_out[model] = left_out_reason(model)
            continue
        used = gpu_hours * draw.idle_watts / 1000 * AWS_PUE
        kwh += used
        co2e += used * grid_factor(region)
        by_model[model] = (hours + gpu_hours, (energy or 0.0) + used)
        by_instance[instance_id] = (round(used, 3), round(used * grid_factor(region), 3))
    return IdleEnergy(
        round(kwh, 2),
        round(co2e, 2),
        by_model,
        round(unknown, 2),
        by_instance,
        round(total, 2),
        left_out,
        hours_by_instance,
        left_out_by_instance,
    )


def basis() -> str:
    """The constants behind every kWh and kg CO2e, named with their sources (the report prints this)."""
    return (
        f"PUE {AWS_PUE} ({PUE_SOURCE}) and grid factors per region ({GRID_SOURCE}; "
        f"{GRID_KG_PER_KWH['unknown']:.3f} kg CO2e/kWh where a region is not listed), from {CCF.split()[0]}"
    )
