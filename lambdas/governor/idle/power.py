"""What an idle GPU draws: per-model idle power and limits from measured samples, and each instance type's GPU.

Power separates two cases utilisation alone cannot: a GPU reading 0 % that is still drawing working power (its
utilisation counter is wrong, or a flatlined exporter), and a GPU reading ~100 % at near-idle power (a deadlocked
NCCL job spinning on a barrier: "stalled"). Idle requires power near the GPU's idle draw whenever power is published.

"Near idle" is ``idle + margin% x (limit - idle)`` (``idle.idle_power_margin_percent``, default 20 %): the idle draw
and the power limit come from measurements with their source, never guesses. :data:`MEASURED` holds the samples the
CloudWatch agent's own test data carries (``nvidia-smi -q -x`` of idle GPUs, copied with their licence into
``tests/fixtures/cloudwatch_agent``); a model without a measurement has no ceiling, so its power is not judged
(the evidence says so) unless the policy gives one (``idle.gpu_power``, from the operator's own idle machines).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from governor.domain import gpus

#: Where each measured figure comes from: the CloudWatch agent's test data (repository aws/amazon-cloudwatch-agent,
#: commit ab55b8daa204e95c42c0267ee5aa49ec3b3a7317, plugins/inputs/nvidia_smi/testdata/).
AGENT_TESTDATA = "aws/amazon-cloudwatch-agent@ab55b8d plugins/inputs/nvidia_smi/testdata"


@dataclass(frozen=True)
class GpuPower:
    """One GPU model's idle draw and power limit, in watts, and where the figures come from: ``source`` in full (this
    table, the energy estimate), ``cite`` its short key, which every decision's ``evidence.power_limit`` carries (a
    routine decision stays under DynamoDB's 1 KB write unit; the key names the sample file of :data:`AGENT_TESTDATA`,
    whose full citation is here and in ``tests/fixtures/cloudwatch_agent/PROVENANCE.md``)."""

    idle_watts: float
    limit_watts: float
    source: str
    cite: str = ""

    def ceiling(self, margin_percent: float) -> float:
        """The most a GPU of this model may draw and still count as idle."""
        return self.idle_watts + margin_percent / 100 * max(self.limit_watts - self.idle_watts, 0.0)


#: Idle GPUs as nvidia-smi measured them (``power_draw`` at 0 % utilisation; the enforced or default limit).
MEASURED: dict[str, GpuPower] = {
    "NVIDIA A10G": GpuPower(
        25.58, 300.0, f"{AGENT_TESTDATA}/a10g.xml: P8, 0 % utilisation, 22 MiB used", "cwagent testdata a10g.xml"
    ),
    "Tesla T4": GpuPower(
        26.78,
        70.0,
        f"{AGENT_TESTDATA}/tesla-t4.xml: P0, 0 % utilisation, 1,032 MiB used",
        "cwagent testdata tesla-t4.xml",
    ),
    "NVIDIA A100-SXM4-80GB": GpuPower(
        67.03,
        500.0,
        f"{AGENT_TESTDATA}/a100-sxm4-v12.xml: P0, MIG mode, four idle slices",
        "cwagent testdata a100-sxm4-v12.xml",
    ),
}


def gpu_model(instance_type: str) -> str | None:
    """The GPU model of an instance type as nvidia-smi names it (``g5.12xlarge`` -> ``NVIDIA A10G``), from its GPU
    facts (DescribeInstanceTypes, else the shipped table: :mod:`governor.domain.gpus`); None when it has no GPU.
    Models without a measured idle draw are named too, so the evidence can say which model lacks one."""
    found = gpus.model_of(instance_type)
    return found[1] if found is not None and found[0] == "gpu" else None


def power_of(instance_type: str, overrides: Mapping[str, GpuPower] | None = None) -> tuple[str | None, GpuPower | None]:
    """The instance type's GPU model and its idle draw: the policy's figure first, then the measured one."""
    model = gpu_model(instance_type)
    if model is None:
        return None, None
    found = (overrides or {}).get(model) or MEASURED.get(model)
    return model, found
