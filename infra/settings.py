"""Deploy-time settings only: names, the policy file to load, the layer to use, the audit region. Read from CDK
context, which ``infra.app_builder`` loads from ``cdk.json`` exactly as the CDK CLI does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAMBDAS_DIR = ROOT / "lambdas"
QUERIES_DIR = ROOT / "queries"
LAYER_BUILD_DIR = ROOT / "build" / "layer"
CDK_JSON = ROOT / "cdk.json"


class SettingsError(ValueError):
    """A context value that cannot produce a working deployment; the synth stops with the reason."""


@dataclass(frozen=True)
class Settings:
    """Context values (``cdk.json`` or ``-c key=value``) with safe defaults for local synth.

    ``audit_region`` names the one region that holds the multi-region trail, the audit lake and the reports; stacks
    in other regions deploy only the regional enforcers, so a fleet in N regions has one trail, not N.
    """

    stack_name: str = "GpuFleetGovernor"
    policy_file: Path = ROOT / "governor.yaml"
    bus_name: str = "governor"
    layer: str = "auto"
    powertools_layer_version: int = 27
    log_retention_days: int = 90
    region: str | None = None
    audit_region: str | None = None

    @property
    def holds_audit(self) -> bool:
        """This stack holds the trail, the audit lake and the reports (always, unless another region does)."""
        return self.audit_region is None or self.audit_region == self.region

    @classmethod
    def from_context(cls, get: Callable[[str], object]) -> Settings:
        defaults = cls()
        policy = get("policy_file")
        region = _text(get("region"))
        audit_region = _text(get("audit_region"))
        if audit_region and not region:
            raise SettingsError(
                "context audit_region is set but region is not: pass -c region=<this stack's region> so the synth "
                "knows whether this stack holds the trail"
            )
        return cls(
            stack_name=_text(get("stack_name")) or defaults.stack_name,
            policy_file=(ROOT / str(policy)) if policy else defaults.policy_file,
            bus_name=_text(get("bus_name")) or defaults.bus_name,
            layer=_text(get("layer")) or defaults.layer,
            powertools_layer_version=int(str(get("powertools_layer_version") or defaults.powertools_layer_version)),
            log_retention_days=int(str(get("log_retention_days") or defaults.log_retention_days)),
            region=region,
            audit_region=audit_region,
        )


def _text(value: object) -> str | None:
    return str(value) if value not in (None, "") else None
