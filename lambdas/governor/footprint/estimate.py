"""The governor's own bill for a fleet under a policy, line by line: what, how many units, at what price, from where.

Unit counts come from the measured model (``usage``: each function's runs under the policy's schedules and the
fleet's events) or are derived from a documented rule of the service (each such line says which); prices come from
``prices``. ``governor cost`` prints the month; the report prices its own period with the same code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from governor.footprint import agent as agents
from governor.footprint.compute import CALL_SECONDS, Line, agent_lines, cloudwatch_lines, lambda_lines
from governor.footprint.storage import audit_lines, dynamodb_lines, event_lines, security_lines
from governor.footprint.usage import MONTH_HOURS, Fleet, load_model, month_of_work


@dataclass
class Estimate:
    """The bill: its lines, total, what dominates, and what the agent could publish instead."""

    fleet: Fleet
    hours: float
    lines: list[Line]
    assumptions: list[str]
    measured: Mapping[str, Any]
    cheapest_agent: dict[str, Any] | None = None
    cheapest_agent_usd: float | None = None
    agent_usd: float = 0.0

    @property
    def total(self) -> float:
        return sum(line.usd for line in self.lines)

    def dominant(self, count: int = 3) -> list[Line]:
        return sorted(self.lines, key=lambda line: -line.usd)[:count]


#: What setting changes each line, for the lines that can dominate.
LEVERS: dict[str, str] = {
    "agent_metrics": "the CloudWatch agent configuration: only the fields the decision reads, by InstanceId, originals "
    "dropped (governor cost --agent-config prints it; idle.memory_change_tolerance_mib or "
    "idle.idle_power_margin_percent null drops a field)",
    "agent_requests": "the agent's force_flush_interval (one PutMetricData a flush; keep it under "
    "idle.max_sample_age_minutes)",
    "getmetricdata": "idle.schedule (every sweep requests each instance's signals: rate(30 minutes) halves it) and "
    "idle.idle_power_margin_percent (null: one metric fewer per instance)",
    "detailed_monitoring": "idle.cpu_utilization_threshold and idle.network_bytes_threshold (null: no one-minute EC2 "
    "metrics needed)",
    "dynamodb_storage": "ledger.retention_days (every sweep records a decision per instance, kept that long)",
    "dynamodb_pitr": "ledger.retention_days",
    "dynamodb_writes": "idle.schedule (a decision per instance per sweep)",
    "cloudtrail": "audit.create_trail: false with existing_bucket_name, to query the account's own trail instead of "
    "paying for a second copy",
    "athena": "reports.daily_schedule / weekly_schedule and the account's CloudTrail volume",
}


def estimate(
    policy: Any,
    fleet: Fleet,
    *,
    agent: Mapping[str, Any] | None = None,
    hours: float = MONTH_HOURS,
    observed: Mapping[str, float] | None = None,
) -> Estimate:
    """The bill for ``fleet`` under ``policy`` for ``hours`` (a month by default). ``agent`` is the CloudWatch agent
    configuration the fleet runs (its metrics are the fleet's, caused by the governor's needs); None leaves them out
    (the report prices the governor's own resources only). ``observed``: runs counted instead of scheduled, by
    trigger (``usage.month_of_work``)."""
    model = load_model()
    work = month_of_work(policy, fleet, hours, observed)
    share = hours / MONTH_HOURS
    lines: list[Line] = []
    lines += lambda_lines(work, model)
    lines += cloudwatch_lines(work, model, policy, fleet, share)
    lines += dynamodb_lines(work, model, policy, fleet, share)
    lines += event_lines(work, model, policy, fleet, share)
    lines += audit_lines(work, model, policy, fleet, share)
    lines += security_lines(work, policy, fleet, share)
    result = Estimate(fleet, hours, [line for line in lines if line.units > 0], _assumptions(fleet), model["measured"])
    if agent is not None:
        result.lines += agent_lines(agent, policy, fleet, share)
        result.agent_usd = sum(line.usd for line in result.lines if line.key.startswith("agent_"))
        cheapest = agents.cheapest_config(policy)
        result.cheapest_agent = cheapest
        result.cheapest_agent_usd = sum(line.usd for line in agent_lines(cheapest, policy, fleet, share))
    return result


def _assumptions(fleet: Fleet) -> list[str]:
    return [
        f"{fleet.idle_share:.0%} of the instances idle at a sweep (--idle-share)",
        f"{fleet.idle_episodes:g} idle episode(s) per instance a month (--idle-episodes)",
        f"{fleet.launches:g} launch(es) per instance a month (--launches)",
        f"{fleet.interruptions:g} Spot interruption(s) per instance a month (--interruptions)",
        f"{fleet.account_events:,.0f} other management events per account and region a month (--account-events)",
        f"{fleet.gpus_per_instance:g} GPUs per instance (--gpus-per-instance: only per-GPU agent series depend on it)",
        f"each AWS call's round trip counted at {CALL_SECONDS * 1000:.0f} ms and every invocation as a cold start",
    ]
