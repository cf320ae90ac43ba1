"""What the idle decision needs the fleet to publish under its policy: the CloudWatch agent's GPU fields, how fresh
a sample must be, and whether EC2's own one-minute host metrics (detailed monitoring) are read.

The signals are the idle section's to name; what they cost is the footprint's to price (``governor cost`` and the
report's cost line ask :meth:`governor.capability.Registry.fleet_signals`, declared in ``idle/capability.py``).
"""

from __future__ import annotations

from governor.core_policy import CorePolicy, section_of
from governor.domain.costs import FleetSignals
from governor.idle.policy import IdlePolicy


def fleet_signals(policy: CorePolicy) -> FleetSignals:
    """Utilisation always; memory unless ``idle.memory_change_tolerance_mib`` is null; power unless
    ``idle.idle_power_margin_percent`` is null; host metrics when a CPU or network threshold is set."""
    idle = section_of(policy, "idle", IdlePolicy)
    fields = ["utilization_gpu"]
    if idle.memory_change_tolerance_mib is not None:
        fields.append("memory_used")
    if idle.idle_power_margin_percent is not None:
        fields.append("power_draw")
    host = any(t is not None for t in (idle.cpu_utilization_threshold, idle.network_bytes_threshold))
    return FleetSignals(
        agent_fields=tuple(fields), max_sample_age_minutes=idle.max_sample_age_minutes, host_metrics=host
    )
