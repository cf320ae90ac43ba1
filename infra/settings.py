"""Deploy-time settings only: names, the policy file to load, the layer to use. Read from CDK context."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAMBDAS_DIR = ROOT / "lambdas"
QUERIES_DIR = ROOT / "queries"
LAYER_BUILD_DIR = ROOT / "build" / "layer"

sys.path.insert(0, str(LAMBDAS_DIR))


@dataclass(frozen=True)
class Settings:
    """Context values (``cdk.json`` or ``-c key=value``) with safe defaults for local synth."""

    stack_name: str = "GpuFleetGovernor"
    policy_file: Path = ROOT / "governor.yaml"
    bus_name: str = "governor"
    layer: str = "auto"
    powertools_layer_version: int = 27
    log_retention_days: int = 90

    @classmethod
    def from_context(cls, get: object) -> Settings:
        lookup = get  # app.node.try_get_context
        assert callable(lookup)
        defaults = cls()
        policy = lookup("policy_file")
        return cls(
            stack_name=lookup("stack_name") or defaults.stack_name,
            policy_file=(ROOT / policy) if policy else defaults.policy_file,
            bus_name=lookup("bus_name") or defaults.bus_name,
            layer=lookup("layer") or defaults.layer,
            powertools_layer_version=int(lookup("powertools_layer_version") or defaults.powertools_layer_version),
            log_retention_days=int(lookup("log_retention_days") or defaults.log_retention_days),
        )
