"""``governor explain --metrics EXPORT``: what one idle sweep would decide for each EKS GPU node of a cluster
metrics export, acting on nothing.

The export is read by the backtest's readers (a Prometheus range-query JSON answer or text exposition of the DCGM
exporter's series, ``governor_cli.sim.prometheus_export``; Container Insights performance log events,
``governor_cli.sim.container_insights_export``), so each node has one series per GPU and MIG slice, as the sweep's
cluster sources give it. Then the sweep's own ``governor.idle.sweep.sweep`` runs on the node alone at ``at`` (the
end of the export by default) with the metrics a sweep then reads (its lookback), so the verdict, the reasons, the
per-GPU evidence and the planned action are the sweep's: one busy GPU or slice keeps the node, missing or stale data
is never idle. What explain cannot know is said as ``assumed:`` lines: no idle mark yet (the first sweep that sees
the node), the node judged alone (the rate limit and the breaker see the whole fleet), and, without ``--instances``,
the instance's tags, type and launch time.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from governor.domain.fleet import Instance
from governor.idle.domain import Series, lookback_start, sweep_interval
from governor.idle.sweep import sweep
from governor.policy import Policy
from governor_cli.sim import container_insights_export, prometheus_export
from governor_cli.sim.metrics_file import MetricsFileError

#: Without ``--instances`` a node is judged as an On-Demand, EBS-backed instance launched before the export began.
_LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def read_nodes(path: Path) -> tuple[str, dict[str, dict[str, Series]], dict[str, str]]:
    """The export's kind, each node's signals (``signal@device``), and the node names of instance-keyed nodes.

    Raises ``MetricsFileError`` for a file that is neither export.
    """
    if container_insights_export.is_container_insights_export(path):
        export = container_insights_export.read_export(path)
        return "Container Insights", export.signals(), dict(export.nodes)
    if prometheus_export.is_prometheus_export(path):
        signals, readings = prometheus_export.read_export(path)
        return "Prometheus (DCGM exporter)", signals, {k: r.node for k, r in readings.items() if r.node != k}
    raise MetricsFileError(
        f"{path}: not a cluster metrics export (a Prometheus range-query JSON answer or text exposition of DCGM "
        "exporter series, or Container Insights performance log events)"
    )


def end_of(signals: Mapping[str, Mapping[str, Series]]) -> dt.datetime:
    """The end of the newest sample's minute: a sweep then sees every sample of the export."""
    newest = max(s.times[-1] for series in signals.values() for s in series.values() if s.times)
    return dt.datetime.fromtimestamp(newest + 60, dt.UTC)


def _window(signals: Mapping[str, Series], low: float, high: float) -> dict[str, Series]:
    part: dict[str, Series] = {}
    for key, series in signals.items():
        a, b = bisect.bisect_left(series.times, low), bisect.bisect_right(series.times, high)
        part[key] = Series(series.times[a:b], series.values[a:b])
    return part


def explain_node(
    node: str,
    signals: Mapping[str, Series],
    policy: Policy,
    at: dt.datetime,
    *,
    source: str,
    instance: Instance | None = None,
    node_name: str | None = None,
) -> dict[str, Any]:
    """The result ``governor explain`` prints (``event`` names the node and the sweep), with one decision."""
    interval = sweep_interval(policy.idle)
    since = lookback_start(policy.idle, at, interval)
    assumptions = [
        "assumed: no idle mark yet (the first sweep that sees the node idle warns; later sweeps act after the "
        f"{policy.idle.warning_minutes}-min warning)",
        "assumed: the node judged alone (the rate limit and the circuit breaker see the whole fleet)",
    ]
    if instance is None:
        instance = Instance(id=node, type="unknown", state="running", launch_time=_LONG_AGO)
        assumptions.append(
            "assumed: an On-Demand, EBS-backed instance without tags, launched before the export began (pass "
            "--instances with `aws ec2 describe-instances` output for its tags, type, owner and node pool)"
        )
    plan = sweep(
        [instance],
        {instance.id: _window(signals, since.timestamp(), at.timestamp())},
        {},
        policy,
        at,
        interval=interval,
    )
    outcome = plan.outcomes[0]
    decision = outcome.decision
    public = decision.public()
    public["assumptions"] = [*assumptions, *public.get("assumptions", [])]
    if outcome.row is not None:  # the row of the decision table that decided (governor.idle.table)
        public["rule"] = outcome.row.public()
    named = f" ({node_name})" if node_name else ""
    return {
        "verdict": decision.verdict,
        "event": {"id": f"{node}{named}", "kind": f"idle sweep at {at.isoformat()}, metrics from {source}"},
        "decisions": [public],
        "status": decision.evidence.get("status"),
        "evidence": decision.evidence,
    }


def explain_export(
    path: Path,
    policy: Policy,
    *,
    at: dt.datetime | None = None,
    node: str | None = None,
    instances: Mapping[str, Instance] | None = None,
) -> list[dict[str, Any]]:
    """One result per node of the export (or only ``node``: an instance id or a node name)."""
    source, signals, names = read_nodes(path)
    if node is not None:
        wanted = [key for key in signals if node in (key, names.get(key))]
        if not wanted:
            known = ", ".join(sorted(f"{k} ({names[k]})" if k in names else k for k in signals)[:10])
            raise MetricsFileError(f"{path}: no node {node!r} in the export (it has {known})")
        signals = {key: signals[key] for key in wanted}
    when = at or end_of(signals)
    return [
        explain_node(
            key,
            series,
            policy,
            when,
            source=source,
            instance=(instances or {}).get(key),
            node_name=names.get(key),
        )
        for key, series in sorted(signals.items())
    ]
