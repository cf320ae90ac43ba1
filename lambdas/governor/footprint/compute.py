"""The bill's lines for compute and CloudWatch: each function's Lambda time, its traces and logs, the idle sweep's
metric reads, the stack's alarms and dashboard, the metrics the functions publish, and the CloudWatch agent's on the
fleet. Each line's units come from the measured model (``usage``) or a documented rule it names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from governor.footprint import agent as agents
from governor.footprint.prices import CUSTOM_METRIC_TEXT, GB, PRICES, custom_metrics_cost
from governor.footprint.usage import DAYS_PER_MONTH, MONTH_HOURS, Fleet, Work

#: Lambda gives a function one vCPU at 1,769 MB and a share below it, so CPU-bound work takes longer with less memory.
FULL_VCPU_MB = 1769
#: An AWS API call's round trip inside a region, which the emulator cannot measure: an assumption, stated.
CALL_SECONDS = 0.025
#: Lambda's own JSON log records per invocation (platform.start and platform.report, sized from the examples in the
#: Lambda Developer Guide, "Log-level filtering"): about 450 bytes.
PLATFORM_LOG_BYTES = 450
#: DynamoDB caches a table's key for a caller and calls KMS again after 5 minutes (KMS Developer Guide, "How Amazon
#: DynamoDB uses AWS KMS"): at most 12 calls an hour per function and table.
KEY_CACHE_CALLS_PER_HOUR = 12
TABLES = 2  # the ledger and the idempotency table
#: CloudTrail delivers a log file about every 5 minutes per account and region (CloudTrail User Guide): each is a
#: KMS-encrypted object that Athena decrypts once when a query reads it.
TRAIL_OBJECTS_PER_DAY = 288


@dataclass(frozen=True)
class Line:
    """One line of the bill."""

    key: str
    what: str
    units: float
    unit: str
    price: str
    source: str
    usd: float


def measured(model: Mapping[str, Any], what: str) -> str:
    meta = model["measured"]
    return f"measured: {what} (moto, {meta['date']}, {meta['commit']})"


def line(key: str, what: str, units: float, unit: str, price: str, source: str) -> Line:
    rate = PRICES[price]
    return Line(key, what, units, unit, rate.text, f"{source}; {rate.source}", rate.cost(units))


def _seconds(units: Mapping[str, float], runs: float, memory: int, init: float) -> float:
    """A function's billed seconds: its own CPU at its memory's CPU share, its calls' round trips, its cold starts."""
    slower = max(1.0, FULL_VCPU_MB / memory)
    return (units.get("cpu_seconds", 0.0) + init * runs) * slower + units.get("aws_calls", 0.0) * CALL_SECONDS


def total(work: Mapping[str, Work], unit: str) -> float:
    return sum(month.units.get(unit, 0.0) for month in work.values())


def lambda_lines(work: Mapping[str, Work], model: Mapping[str, Any]) -> list[Line]:
    lines: list[Line] = []
    requests = 0.0
    for name, month in work.items():
        if not month.invocations:
            continue
        function = model["functions"].get(name, {"memory_mb": 512, "init_cpu_seconds": 0.0})
        memory = int(function["memory_mb"])
        seconds = _seconds(month.units, month.invocations, memory, float(function["init_cpu_seconds"]))
        requests += month.invocations
        what = f"Lambda {name}: {month.invocations:,.0f} runs at {memory} MB"
        lines.append(
            line(f"lambda.{name}", what, seconds * memory / 1024, "GB-s", "lambda_gb_seconds", measured(model, name))
        )
    lines.append(
        line(
            "lambda_requests",
            "Lambda requests, every function",
            requests,
            "requests",
            "lambda_requests",
            measured(model, "runs under the policy's schedules"),
        )
    )
    lines.append(
        line(
            "xray",
            "X-Ray traces (active tracing, each run traced)",
            requests,
            "traces",
            "xray_traces",
            "derived: one trace per run (below the sampling reservoir)",
        )
    )
    return lines


def cloudwatch_lines(
    work: Mapping[str, Work], model: Mapping[str, Any], policy: Any, fleet: Fleet, share: float
) -> list[Line]:
    log_bytes = total(work, "log_bytes") + PLATFORM_LOG_BYTES * sum(w.invocations for w in work.values())
    retention = float(model.get("resources", {}).get("log_retention_days", 90))
    own = len(model.get("custom_metrics", [])) * max(1, fleet.regions)
    resources = model.get("resources", {})
    lines = [
        line(
            "getmetricdata",
            "CloudWatch GetMetricData: the idle sweep's metrics",
            total(work, "getmetricdata_metrics"),
            "metrics",
            "getmetricdata",
            measured(model, "metrics requested per instance and sweep"),
        ),
        line(
            "logs_ingested",
            "CloudWatch Logs ingested (every function, with Lambda's records)",
            log_bytes / GB,
            "GB",
            "logs_ingested",
            measured(model, "bytes logged per run") + f" + {PLATFORM_LOG_BYTES} B per run",
        ),
        line(
            "logs_stored",
            f"CloudWatch Logs stored ({retention:.0f}-day retention)",
            log_bytes / GB * retention / DAYS_PER_MONTH,
            "GB-months",
            "logs_stored",
            "derived: a month's logs times the months kept (raw size, before compression)",
        ),
        line(
            "alarms",
            "CloudWatch alarms",
            float(resources.get("alarms", 0)) * max(1, fleet.regions) * share,
            "alarm-months",
            "alarms",
            "measured: alarms in the synthesized stack, per region",
        ),
        line(
            "dashboards",
            "CloudWatch dashboard",
            float(resources.get("dashboards", 0)) * max(1, fleet.regions) * share,
            "dashboard-months",
            "dashboards",
            "measured: dashboards in the synthesized stack, per region",
        ),
    ]
    lines.append(
        Line(
            "custom_metrics_own",
            "CloudWatch custom metrics the functions publish (EMF)",
            own * share,
            "metrics",
            CUSTOM_METRIC_TEXT,
            measured(model, "metric names logged as EMF") + "; https://aws.amazon.com/cloudwatch/pricing/",
            custom_metrics_cost(own) * share,
        )
    )
    if agents.signals(policy).host_metrics:
        metrics = fleet.instances * 7
        lines.append(
            Line(
                "detailed_monitoring",
                "EC2 detailed monitoring (one-minute CPU or network for the idle decision)",
                metrics * share,
                "metrics",
                CUSTOM_METRIC_TEXT,
                "derived: 7 metrics per instance billed as custom metrics; https://aws.amazon.com/cloudwatch/pricing/",
                tiered(metrics, fleet.accounts) * share,
            )
        )
    return lines


def tiered(metrics: float, accounts: int) -> float:
    """Custom metrics spread over ``accounts`` accounts, each with its own tiers."""
    each = metrics / max(1, accounts)
    return custom_metrics_cost(each) * max(1, accounts)


def agent_lines(config: Mapping[str, Any], policy: Any, fleet: Fleet, share: float) -> list[Line]:
    per = agents.metrics_per_instance(config, fleet.gpus_per_instance)
    metrics = per * fleet.instances
    fields = ", ".join(agents.fields_of(config))
    requests = agents.requests_per_instance(config, MONTH_HOURS * share) * fleet.instances
    return [
        Line(
            "agent_metrics",
            f"CloudWatch agent custom metrics on the fleet ({per:g} per instance: {fields})",
            metrics * share,
            "metrics",
            CUSTOM_METRIC_TEXT,
            "derived: the agent configuration's fields x (GPUs unless dropped + aggregations); "
            "https://aws.amazon.com/cloudwatch/pricing/",
            tiered(metrics, fleet.accounts) * share,
        ),
        line(
            "agent_requests",
            "CloudWatch agent PutMetricData requests (one a flush per instance)",
            requests,
            "requests",
            "cloudwatch_requests",
            "derived: the configuration's force_flush_interval",
        ),
    ]
