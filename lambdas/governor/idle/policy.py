"""The ``idle`` section of governor.yaml, declared here (the registry entry names it; ``governor.policy`` adds it
to ``Policy``)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from governor.idle.activity_policy import ActivitySignal
from governor.policy_types import Exemptions, Schedule, Section

WEEK_MINUTES = 7 * 24 * 60
MAX_GPU_MEMORY_MIB = 1024 * 1024  # 1 TiB, several times the largest GPU's memory
MAX_NETWORK_BYTES = 10.0**15
MAX_GPU_WATTS = 2000.0  # the most one GPU's power limit may be (today's largest are about 1,000 W)


#: Large accelerated types AWS sells mostly through Capacity Blocks and reservations (fnmatch patterns).
SCARCE_TYPES = (
    "p4d.*",
    "p4de.*",
    "p5.*",
    "p5e.*",
    "p5en.*",
    "p6-*",
    "p6e-*",
    "trn1.*",
    "trn1n.*",
    "trn2.*",
    "trn2u.*",
)


class GpuPowerEntry(Section):
    """One GPU model's idle draw and power limit in watts, measured on the operator's own idle machines."""

    idle_watts: float = Field(gt=0, le=MAX_GPU_WATTS)
    limit_watts: float = Field(gt=0, le=MAX_GPU_WATTS)

    @model_validator(mode="after")
    def _idle_below_limit(self) -> GpuPowerEntry:
        if self.idle_watts >= self.limit_watts:
            raise ValueError("idle_watts must be below limit_watts")
        return self


#: PromQL label matchers and nothing else (no braces, no expression): what a cluster's ``selector`` may hold.
_PROMQL_MATCHERS = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*(,\s*|$))*$')


class KubernetesCluster(Section):
    """An EKS cluster whose GPU nodes are judged from its own metrics (DCGM through Prometheus, or Container Insights)
    instead of the instance metric source; its nodes are still the EC2 instances the fleet lists."""

    name: str = Field(min_length=1, max_length=100, pattern=r"^[0-9A-Za-z][A-Za-z0-9\-_]*$")
    metric_source: Literal["prometheus", "container_insights"]
    # Prometheus' HTTP API base: an Amazon Managed Prometheus workspace
    # (https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>, SigV4-signed) or any compatible endpoint.
    prometheus_url: str | None = Field(None, max_length=2000)
    # Sign requests with SigV4 (service aps) in this region; default: the region of an AMP workspace URL.
    sigv4_region: str | None = Field(None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    # The DCGM exporter label naming the node (hostname in 3.x+, Hostname before; node under some scrape configs).
    node_label: str = Field("Hostname", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    # Label matchers added to every query, e.g. cluster="gpu-prod" when one workspace holds several clusters.
    selector: str = Field("", max_length=500)
    # An idle node of this cluster: report (warned, then reported, never touched) or drain (cordon, evict through the
    # Eviction API respecting PodDisruptionBudgets, then delete its Karpenter NodeClaim or terminate it in its managed
    # node group with desired capacity lowered), through the Kubernetes API with the idle role's EKS access entry.
    # drain acts only while idle.enforce is true.
    reclaim: Literal["report", "drain"] = "report"
    # namespace -> team, for GPU-hours by team (a namespace not listed is its own team).
    namespace_teams: dict[str, str] = Field(default_factory=dict, max_length=1000)
    # Organisation mode: the member account and region the cluster is in (both, or neither for a cluster in the
    # governor's own account and region). Its nodes are judged in that target's sweep, its AMP workspace is signed and
    # its API reached with the spoke role there, and only that account's spoke stack creates the role's access entry.
    account: str | None = Field(None, pattern=r"^\d{12}$")
    region: str | None = Field(None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")

    @model_validator(mode="after")
    def _source_settings(self) -> KubernetesCluster:
        if self.metric_source == "prometheus":
            if not self.prometheus_url:
                raise ValueError("prometheus_url is required when metric_source is prometheus")
            if not re.match(r"^https?://[^/\s]+(/\S*)?$", self.prometheus_url):
                raise ValueError("prometheus_url must be an http(s) URL")
        elif self.prometheus_url:
            raise ValueError("prometheus_url is only for metric_source prometheus")
        if self.selector and not _PROMQL_MATCHERS.match(self.selector):
            raise ValueError('selector must be PromQL label matchers only, e.g. cluster="gpu-prod"')
        if (self.account is None) != (self.region is None):
            raise ValueError("account and region go together: the member account and region the cluster is in")
        return self

    def in_target(self, account: str | None, region: str | None) -> bool:
        """Whether the sweep of ``account``/``region`` (None: the governor's own) judges this cluster's nodes."""
        return self.account == account and (account is None or self.region == region)

    def __hash__(self) -> int:  # frozen, but namespace_teams is a dict: hash what identifies the source
        return hash(
            (
                self.name,
                self.metric_source,
                self.prometheus_url,
                self.sigv4_region,
                self.node_label,
                self.selector,
                self.account,
                self.region,
            )
        )


class StoppedPolicy(Section):
    """Stopped GPU instances: what they still bill (EBS volumes, public IPv4), and when to let them go."""

    # costs report: every stopped GPU instance's monthly cost of its volumes and public IPv4 addresses, a decision every
    # sweep and a finding a day to its owner; off: not read (one DescribeInstances, DescribeVolumes and
    # DescribeAddresses a sweep saved).
    costs: Literal["report", "off"] = "report"
    # Off (null) by default. A number of days: an instance stopped at least this long is due to have every volume
    # snapshotted (its tags copied) and to be terminated; its owner is told each day until then. With idle.enforce,
    # every volume is snapshotted (re-read first), then the instance terminated once every snapshot completed.
    snapshot_and_terminate_after_days: int | None = Field(None, ge=1, le=3650)


class IdlePolicy(Section):
    """Reclaim GPU instances that every signal says are idle, warning first; never a working machine."""

    enforce: bool = False
    schedule: Schedule = "rate(15 minutes)"
    window_minutes: int = Field(120, ge=15, le=24 * 60)
    gpu_utilization_threshold: float = Field(5.0, gt=0, le=100)
    # None: GPU memory is not a required signal (for agents that export utilisation only).
    memory_change_tolerance_mib: float | None = Field(256.0, ge=0, le=MAX_GPU_MEMORY_MIB)
    # The unit the metric source publishes GPU memory in; the CloudWatch agent's nvidia_smi plugin publishes MB (MiB).
    gpu_memory_unit: Literal["MB", "MiB", "bytes"] = "MB"
    cpu_utilization_threshold: float | None = Field(None, gt=0, le=100)
    network_bytes_threshold: float | None = Field(None, gt=0, le=MAX_NETWORK_BYTES)
    min_samples_fraction: float = Field(0.8, gt=0, le=1)
    launch_grace_minutes: int = Field(30, ge=0, le=WEEK_MINUTES)
    warning_minutes: int = Field(30, ge=0, le=WEEK_MINUTES)
    on_demand_action: Literal["stop", "terminate"] = "stop"
    spot_action: Literal["stop", "terminate"] = "terminate"
    checkpoint_command: str | None = None
    checkpoint_timeout_seconds: int = Field(300, ge=30, le=3600)
    max_actions_per_sweep: int = Field(10, ge=0, le=1000)
    max_fleet_percent: float = Field(20.0, ge=0, le=100)
    # The newest GPU sample must be at most this old when judged and again right before acting, else unmonitored.
    max_sample_age_minutes: int = Field(5, ge=1, le=60)
    # Circuit breaker: at least breaker_min_instances turning idle together can be a metrics or driver outage ...
    breaker_fleet_percent: float = Field(25.0, gt=0, le=100)
    breaker_min_instances: int = Field(5, ge=2, le=10_000)
    # ... but only instances whose quiet stretches began within this many minutes of each other (a failure hits every
    # node in the same minute; an evening lull spreads over hours), and only with a failure's signature: more than
    # breaker_fleet_percent of the monitored fleet at once, or half of them with a measurement-failure sign (memory or
    # power reading exactly 0, power frozen, samples missing at the onset), or breaker_min_teams teams at once.
    breaker_onset_minutes: int = Field(2, ge=1, le=60)
    breaker_min_teams: int = Field(3, ge=2, le=1000)
    # The hold is short and clears by itself: after this many minutes only instances still showing a sign stay held.
    breaker_hold_minutes: int = Field(45, ge=15, le=24 * 60)
    # Power: when the source publishes it, idle also needs the GPU near its idle draw, i.e. at most idle + this percent
    # of (limit - idle) for its model (governor/idle/power.py; gpu_power adds or overrides models). null: not judged.
    idle_power_margin_percent: float | None = Field(20.0, ge=0, le=100)
    gpu_power: dict[str, GpuPowerEntry] = Field(default_factory=dict, max_length=100)
    # Stalled: utilisation at or above this over the whole window at near-idle power, memory not moving (a hung NCCL
    # job): a finding to the owner, never a stop. null: not looked for. Needs the model's idle draw.
    stall_utilization_threshold: float | None = Field(90.0, gt=0, le=100)
    # Where the sweep reads GPU metrics (governor.idle.sources): one name per metric source implementation.
    metric_source: Literal["cloudwatch_agent"] = "cloudwatch_agent"
    # EKS clusters whose GPU nodes are read from their own source (governor/idle/kubernetes); other instances from
    # metric_source. One sweep combines them: a node a cluster source has no series for is read from metric_source.
    clusters: tuple[KubernetesCluster, ...] = Field((), max_length=50)
    # Instances of an Auto Scaling group: reclaimed through the group (desired capacity decremented, never below
    # its minimum) or reported only. EKS and Karpenter nodes are reported only unless their cluster drains them.
    asg_action: Literal["scale_in", "report"] = "scale_in"
    # Capacity paid for whatever happens (Capacity Blocks for ML, On-Demand Capacity Reservations) or lent
    # (interruptible reservations): never stopped for savings; idle GPU-hours reported as paid for, unused.
    # stop_if_open: an instance in an *open* On-Demand Capacity Reservation may be stopped (its slot is free for any
    # matching instance). Capacity Blocks, targeted and interruptible reservations are never stopped.
    # offer: also tell offer_capacity_to (a team of notifications.teams, chosen here, never by a tag) that the idle
    # instance's reservation or block, or a reservation's unused capacity, is free until it ends: once a day per
    # reservation, recorded as a decision (idle.capacity-offered); nothing is stopped or cancelled.
    reserved_capacity: Literal["report", "offer", "stop_if_open"] = "report"
    offer_capacity_to: str | None = Field(None, min_length=1, max_length=64)
    # Active GPU capacity reservations (On-Demand Capacity Reservations, Capacity Blocks) with capacity no instance
    # runs in: reported (a finding a day per reservation, the report's "paid for, unused" section), never cancelled.
    # off: not read (one DescribeCapacityReservations a sweep saved).
    unused_reservations: Literal["report", "off"] = "report"
    # Stopped GPU instances still bill their volumes and public IPv4 addresses (governor.idle.stopped).
    stopped: StoppedPolicy = Field(default_factory=StoppedPolicy)
    # Instance types the team may not get back once stopped (On-Demand capacity for them is often short): the restart
    # risk is recorded with every decision about an idle one (evidence.restart_risk) and said in its warning and
    # report. scarce_action warn: they are warned about and reported, never stopped; stop: reclaimed like any other.
    scarce_types: list[Annotated[str, Field(pattern=r"^[a-z0-9.*?\[\]-]+$")]] = Field(
        default_factory=lambda: list(SCARCE_TYPES), max_length=100
    )
    scarce_action: Literal["warn", "stop"] = "stop"
    cloudwatch_agent_association: bool = False
    association_tag: dict[str, str] = Field(default_factory=lambda: {"governor:gpu-metrics": "true"})
    exemptions: Exemptions = Field(default_factory=Exemptions)
    # Metrics the team defines (governor/idle/activity_policy.py) that keep a machine while a sample in the window reads
    # above its threshold: they can only keep, never make idle; no data for one is unknown (never idle).
    activity_signals: tuple[ActivitySignal, ...] = Field((), max_length=20)

    @model_validator(mode="after")
    def _signal_names_unique(self) -> IdlePolicy:
        names = [s.name for s in self.activity_signals]
        if len(names) != len(set(names)):
            raise ValueError("activity_signals: each signal needs its own name")
        prometheus = {c.name for c in self.clusters if c.metric_source == "prometheus"}
        for index, signal in enumerate(self.activity_signals):
            if signal.cluster is not None and signal.cluster not in prometheus:
                raise ValueError(
                    f"activity_signals.{index}.cluster: {signal.cluster!r} is not a cluster of idle.clusters read "
                    "from Prometheus (a PromQL signal speaks only for that cluster's nodes)"
                )
        return self
