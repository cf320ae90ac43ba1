"""What accelerators an EC2 instance type carries: kind, maker, model, how many (a fraction for a shared GPU) and
their memory, so idle, costs, energy, the report and ``governor explain`` agree on "a GPU instance, with what".

The truth is EC2's ``DescribeInstanceTypes`` (``GpuInfo.Gpus[]``: name, manufacturer, count, memory, and for a
fractional GPU such as ``g6f.large`` ``LogicalGpuCount`` 1 with ``GpuPartitionSize`` 0.125; ``NeuronInfo`` for
Trainium and Inferentia; ``InferenceAcceleratorInfo`` for the rest). :mod:`governor.adapters.instance_types` reads it
for the types a function sees and :func:`learn` keeps what it read for the container's life; :func:`facts_of` answers
from that first, else from :data:`SHIPPED`, the table below, so a denied or failed call (or ``governor explain``,
which reads nothing from AWS) still knows today's families.

:data:`SHIPPED` is ``DescribeInstanceTypes`` as recorded in moto 5.2.5's ``ec2/resources/instance_types.json.gz``
(us-east-1) for every type with accelerators, checked against AWS's "Amazon EC2 accelerated computing instance types"
page (https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html, read 2026-12-06), plus the types that recording
lacks, from that page: ``p3`` (V100 16 GB), ``p6e-gb200.36xlarge`` (one GB200 NVL72 compute tray: 4 B200 GPUs,
185 GB HBM3e each), ``dl1.24xlarge`` (8 Habana Gaudi, 32 GB) and ``g4ad`` (AMD Radeon Pro V520, 8 GB).

A model is named as ``nvidia-smi`` names it where the governor knows that name (``NVIDIA A10G``, ``Tesla T4``,
``NVIDIA H100 80GB HBM3``): that is the name the CloudWatch agent publishes, and the key of the idle power table and
of ``idle.gpu_power``. Pure: no AWS call here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

Kind = Literal["gpu", "neuron", "inference"]

SHIPPED_SOURCE = "shipped table (DescribeInstanceTypes as of 2026-12-06)"
API_SOURCE = "DescribeInstanceTypes"


@dataclass(frozen=True)
class GpuFacts:
    """One instance type's accelerators.

    ``count`` is whole-accelerator equivalents: 8 for ``p5.48xlarge``, 0.125 for ``g6f.large`` (an eighth of an L4),
    what GPU-hours and energy multiply by. ``devices`` is how many the instance sees (1 for a ``g6f``) and
    ``memory_mib`` the memory of each of them."""

    instance_type: str
    kind: Kind
    manufacturer: str
    model: str
    count: float
    devices: int
    memory_mib: int
    source: str

    @property
    def fractional(self) -> bool:
        """A share of one GPU (g6f, gr6f): its GPU-hours are its share of the hours."""
        return self.count < 1

    def label(self) -> str:
        """``8 x NVIDIA B200, 179 GiB each`` or ``1/8 of an NVIDIA L4, 2.8 GiB``: for explain and the report."""
        memory = f"{self.memory_mib / 1024:,.1f}".removesuffix(".0") + " GiB"
        if self.fractional:
            share = Fraction(self.count).limit_denominator(64)
            return f"{share} of {_article(self.model)} {self.model}, {memory}"
        whole = int(self.count) if float(self.count).is_integer() else self.count
        return f"{whole} x {self.model}, {memory} each"


def _article(model: str) -> str:
    return "an" if model[:1].upper() in "AEIOU" or model.startswith(("NVIDIA", "L4", "H1", "H2")) else "a"


#: The name EC2 gives a model (and its memory, where one name covers two boards) -> the name nvidia-smi gives it.
SMI_NAMES: dict[tuple[str, int | None], str] = {
    ("T4", None): "Tesla T4",
    ("T4g", None): "NVIDIA T4G",
    ("A10G", None): "NVIDIA A10G",
    ("L4", None): "NVIDIA L4",
    ("L40S", None): "NVIDIA L40S",
    ("V100", 16384): "Tesla V100-SXM2-16GB",
    ("V100", 32768): "Tesla V100-SXM2-32GB",
    ("A100", 40960): "NVIDIA A100-SXM4-40GB",
    ("A100", 81920): "NVIDIA A100-SXM4-80GB",
    ("H100", None): "NVIDIA H100 80GB HBM3",
    ("H200", None): "NVIDIA H200",
    ("B200", None): "NVIDIA B200",
    ("GB200", None): "NVIDIA GB200",
    ("B300", None): "NVIDIA B300",
    ("RTX PRO Server 6000", None): "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    ("RTX PRO 4500", None): "NVIDIA RTX PRO 4500 Blackwell Server Edition",
}


def model_name(manufacturer: str, name: str, memory_mib: int | None) -> str:
    """The nvidia-smi name of a model EC2 names ``name`` (``A100`` with 40 GiB -> ``NVIDIA A100-SXM4-40GB``);
    ``manufacturer name`` for one it does not know (``AWS Trainium2``, ``Habana Gaudi HL-205``)."""
    found = SMI_NAMES.get((name, memory_mib)) or SMI_NAMES.get((name, None))
    if found:
        return found
    return name if name.startswith(manufacturer) else f"{manufacturer} {name}".strip()


#: family -> (kind, manufacturer, EC2's model name, memory per whole device in MiB).
FAMILIES: dict[str, tuple[Kind, str, str, int]] = {
    "g4dn": ("gpu", "NVIDIA", "T4", 16384),
    "g4ad": ("gpu", "AMD", "Radeon Pro V520", 8192),
    "g5": ("gpu", "NVIDIA", "A10G", 22888),
    "g5g": ("gpu", "NVIDIA", "T4g", 16384),
    "g6": ("gpu", "NVIDIA", "L4", 22888),
    "gr6": ("gpu", "NVIDIA", "L4", 22888),
    "g6f": ("gpu", "NVIDIA", "L4", 22888),
    "gr6f": ("gpu", "NVIDIA", "L4", 22888),
    "g6e": ("gpu", "NVIDIA", "L40S", 45776),
    "g7": ("gpu", "NVIDIA", "RTX PRO 4500", 32768),
    "g7e": ("gpu", "NVIDIA", "RTX PRO Server 6000", 98304),
    "p3": ("gpu", "NVIDIA", "V100", 16384),
    "p3dn": ("gpu", "NVIDIA", "V100", 32768),
    "p4d": ("gpu", "NVIDIA", "A100", 40960),
    "p4de": ("gpu", "NVIDIA", "A100", 81920),
    "p5": ("gpu", "NVIDIA", "H100", 81920),
    "p5e": ("gpu", "NVIDIA", "H200", 144384),
    "p5en": ("gpu", "NVIDIA", "H200", 144384),
    "p6-b200": ("gpu", "NVIDIA", "B200", 183359),
    "p6-b300": ("gpu", "NVIDIA", "B300", 275040),
    "p6e-gb200": ("gpu", "NVIDIA", "GB200", 176429),
    "trn1": ("neuron", "AWS", "Trainium", 32768),
    "trn1n": ("neuron", "AWS", "Trainium", 32768),
    "trn2": ("neuron", "AWS", "Trainium2", 524288),
    "inf1": ("neuron", "AWS", "Inferentia", 8192),
    "inf2": ("neuron", "AWS", "Inferentia2", 32768),
    "dl1": ("gpu", "Habana", "Gaudi HL-205", 32768),
    "dl2q": ("inference", "Qualcomm", "AI100", 16000),
}

_EIGHTH, _QUARTER, _HALF = 0.125, 0.25, 0.5
#: instance type -> whole-device equivalents (a fraction for a shared GPU).
SIZES: dict[str, float] = {
    **{f"g4dn.{s}": 1 for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "g4dn.12xlarge": 4,
    "g4dn.metal": 8,
    **{f"g4ad.{s}": 1 for s in ("xlarge", "2xlarge", "4xlarge")},
    "g4ad.8xlarge": 2,
    "g4ad.16xlarge": 4,
    **{f"g5.{s}": 1 for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "g5.12xlarge": 4,
    "g5.24xlarge": 4,
    "g5.48xlarge": 8,
    **{f"g5g.{s}": 1 for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge")},
    "g5g.16xlarge": 2,
    "g5g.metal": 2,
    **{f"g6.{s}": 1 for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "g6.12xlarge": 4,
    "g6.24xlarge": 4,
    "g6.48xlarge": 8,
    "gr6.4xlarge": 1,
    "gr6.8xlarge": 1,
    "g6f.large": _EIGHTH,
    "g6f.xlarge": _EIGHTH,
    "g6f.2xlarge": _QUARTER,
    "g6f.4xlarge": _HALF,
    "gr6f.4xlarge": _HALF,
    **{f"g6e.{s}": 1 for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "g6e.12xlarge": 4,
    "g6e.24xlarge": 4,
    "g6e.48xlarge": 8,
    **{f"g7.{s}": 1 for s in ("2xlarge", "4xlarge", "8xlarge")},
    "g7.12xlarge": 2,
    "g7.24xlarge": 4,
    "g7.48xlarge": 8,
    **{f"g7e.{s}": 1 for s in ("2xlarge", "4xlarge", "8xlarge")},
    "g7e.12xlarge": 2,
    "g7e.24xlarge": 4,
    "g7e.48xlarge": 8,
    "p3.2xlarge": 1,
    "p3.8xlarge": 4,
    "p3.16xlarge": 8,
    "p3dn.24xlarge": 8,
    "p4d.24xlarge": 8,
    "p4de.24xlarge": 8,
    "p5.4xlarge": 1,
    "p5.48xlarge": 8,
    "p5e.48xlarge": 8,
    "p5en.48xlarge": 8,
    "p6-b200.48xlarge": 8,
    "p6-b300.48xlarge": 8,
    "p6e-gb200.36xlarge": 4,
    "trn1.2xlarge": 1,
    "trn1.32xlarge": 16,
    "trn1n.32xlarge": 16,
    "trn2.3xlarge": 1,
    "trn2.48xlarge": 16,
    "inf1.xlarge": 1,
    "inf1.2xlarge": 1,
    "inf1.6xlarge": 4,
    "inf1.24xlarge": 16,
    "inf2.xlarge": 1,
    "inf2.8xlarge": 1,
    "inf2.24xlarge": 6,
    "inf2.48xlarge": 12,
    "dl1.24xlarge": 8,
    "dl2q.24xlarge": 8,
}


def _shipped(instance_type: str) -> GpuFacts | None:
    count = SIZES.get(instance_type)
    family = FAMILIES.get(instance_type.split(".", 1)[0])
    if count is None or family is None:
        return None
    kind, maker, name, memory = family
    return GpuFacts(
        instance_type=instance_type,
        kind=kind,
        manufacturer=maker,
        model=model_name(maker, name, memory),
        count=count,
        devices=max(int(count), 1),
        memory_mib=int(memory * count) if count < 1 else memory,
        source=SHIPPED_SOURCE,
    )


#: Every type with accelerators the shipped table knows.
SHIPPED: dict[str, GpuFacts] = {t: f for t in SIZES if (f := _shipped(t)) is not None}

#: What DescribeInstanceTypes said in this container: instance type -> facts, or None for a type it listed with no
#: accelerator (an ``m5.large``). Filled by :func:`learn`; a Lambda container keeps it across invocations.
_LEARNED: dict[str, GpuFacts | None] = {}
#: The types DescribeInstanceTypes was asked about and answered for (listed or not) in this container.
_ASKED: set[str] = set()


def learn(read: Mapping[str, GpuFacts | None], asked: Iterable[str] = ()) -> None:
    """Keep what DescribeInstanceTypes said about these types, and that it was asked (the adapter calls this)."""
    _LEARNED.update(read)
    _ASKED.update(asked)


def learned() -> frozenset[str]:
    """The types DescribeInstanceTypes has answered for in this container (the adapter asks only for the others)."""
    return frozenset(_ASKED | set(_LEARNED))


def forget() -> None:
    """Drop what was learned (tests; a new container starts empty)."""
    _LEARNED.clear()
    _ASKED.clear()


def facts_of(instance_type: str) -> GpuFacts | None:
    """The type's accelerators: DescribeInstanceTypes' answer when this container has one, else the shipped table's;
    None for a type with none (or one neither knows)."""
    if instance_type in _LEARNED:
        return _LEARNED[instance_type]
    return SHIPPED.get(instance_type)


def model_of(instance_type: str) -> tuple[Kind, str] | None:
    """The kind and model of a type's accelerators: its facts', else its family's (a size the table does not list,
    such as a new ``.metal``, still has its family's GPU; how many is not known)."""
    facts = facts_of(instance_type)
    if facts is not None:
        return facts.kind, facts.model
    if instance_type in _LEARNED:
        return None
    family = FAMILIES.get(instance_type.split(".", 1)[0])
    if family is None:
        return None
    kind, maker, name, memory = family
    return kind, model_name(maker, name, memory)


def gpu_count(instance_type: str, default: float = 1.0) -> float:
    """Whole-GPU equivalents of a type (0.125 for ``g6f.large``); ``default`` when nothing knows the type."""
    facts = facts_of(instance_type)
    return facts.count if facts is not None else default


def label(instance_type: str) -> str:
    """``8 x NVIDIA B200, 179 GiB each``, or what is not known."""
    facts = facts_of(instance_type)
    return facts.label() if facts is not None else "accelerators not known"


def instance_types(items: Iterable[Mapping[str, Any]]) -> set[str]:
    """The instance types ledger items name (sessions, and decisions' evidence): what a report asks EC2 about."""
    found = {str(item.get("instance_type") or "") for item in items}
    found |= {str((item.get("evidence") or {}).get("instance_type") or "") for item in items}
    return {t for t in found if "." in t}


def parse(raw: Mapping[str, Any]) -> GpuFacts | None:
    """One ``InstanceTypes[]`` item of DescribeInstanceTypes, parsed at the edge; None when it has no accelerator."""
    instance_type = str(raw.get("InstanceType") or "")
    gpus = (raw.get("GpuInfo") or {}).get("Gpus") or []
    if gpus:
        return _parse_gpus(instance_type, gpus)
    neuron = (raw.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if neuron:
        return _parse_device(instance_type, "neuron", neuron[0])
    other = (raw.get("InferenceAcceleratorInfo") or {}).get("Accelerators") or []
    if other:
        return _parse_device(instance_type, "inference", other[0])
    return None


def _parse_gpus(instance_type: str, gpus: list[Mapping[str, Any]]) -> GpuFacts:
    """``GpuInfo.Gpus[]``: ``Count`` whole GPUs, or (``Count`` 0) ``LogicalGpuCount`` shares of ``GpuPartitionSize``
    each, such as a ``g6f.large``'s one eighth of an L4."""
    gpu = gpus[0]
    memory = int((gpu.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
    logical = int(gpu.get("LogicalGpuCount") or gpu.get("Count") or 0)
    share = float(gpu.get("GpuPartitionSize") or 1.0)
    whole = sum(int(g.get("Count") or 0) for g in gpus)
    count = whole if whole >= 1 else logical * share
    maker, name = str(gpu.get("Manufacturer") or ""), str(gpu.get("Name") or "")
    model = model_name(maker, name, round(memory / share) if share < 1 else memory)
    return GpuFacts(instance_type, "gpu", maker, model, count, max(logical, whole, 1), memory, API_SOURCE)


def _parse_device(instance_type: str, kind: Kind, device: Mapping[str, Any]) -> GpuFacts:
    """A ``NeuronInfo.NeuronDevices[]`` or ``InferenceAcceleratorInfo.Accelerators[]`` entry (AWS's own chips carry no
    manufacturer: AWS)."""
    maker = str(device.get("Manufacturer") or "AWS")
    count = int(device.get("Count") or 0)
    memory = int((device.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
    model = model_name(maker, str(device.get("Name") or ""), memory)
    return GpuFacts(instance_type, kind, maker, model, count, max(count, 1), memory, API_SOURCE)
