"""The ``network`` section of governor.yaml, declared here (the registry entry names it; ``governor.policy`` adds it
to ``Policy``)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import Field, field_validator

from governor.policy_types import Exemptions, PortRange, Schedule, Section


class NetworkPolicy(Section):
    """Hold security groups and public addresses of the GPU fleet to policy, from the event, in seconds."""

    enforce: bool = False
    world_open_allowed_ports: list[PortRange] = Field(default_factory=list)
    training_ports: list[PortRange] = Field(default_factory=lambda: [PortRange.model_validate("2222-2223")])
    trusted_cidrs: list[str] = Field(default_factory=list)
    trusted_prefix_lists: list[Annotated[str, Field(pattern=r"^pl-[0-9a-f]+$")]] = Field(default_factory=list)
    protected_groups: Exemptions = Field(default_factory=Exemptions)
    public_ip_on_gpu: Literal["deny", "allow"] = "deny"
    sweep_schedule: Schedule = "rate(1 day)"
    scope: Literal["fleet", "all"] = "fleet"
    max_revocations_per_sweep: int = Field(10, ge=0, le=1000)

    @field_validator("trusted_cidrs")
    @classmethod
    def _valid_cidrs(cls, values: list[str]) -> list[str]:
        for value in values:
            network = ipaddress.ip_network(value, strict=False)
            if network.prefixlen == 0:
                raise ValueError(f"{value} is the whole world; it cannot be a trusted source")
        return values
