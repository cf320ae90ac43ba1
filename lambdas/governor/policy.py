"""The one typed definition of ``governor.yaml``.

Imported by ``infra/`` at ``cdk synth`` and by every Lambda at start-up, so a policy that synthesizes is a policy
the runtime accepts. Every section is report-only (``enforce: false``) unless the file says otherwise.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, ValidationError, field_validator, model_validator

from governor.domain.times import EARLIEST, LATEST
from governor.policy_types import MAX_DAYS as MAX_DAYS
from governor.policy_types import Exemptions as Exemptions
from governor.policy_types import PortRange as PortRange
from governor.policy_types import Schedule as Schedule
from governor.policy_types import Section as _Model

if TYPE_CHECKING:
    from governor.keys.policy import KeysPolicy
    from governor.network.policy import NetworkPolicy

DEFAULT_GPU_FAMILIES = ["p", "g", "trn", "inf", "dl"]

# Upper bounds for policy values, so that a policy that validates never overflows a function's date arithmetic or
# asks AWS for something it refuses. Each is far above any sensible setting; `governor validate --ranges` lists them.
WEEK_MINUTES = 7 * 24 * 60
MAX_GPU_MEMORY_MIB = 1024 * 1024  # 1 TiB, several times the largest GPU's memory
MAX_NETWORK_BYTES = 10.0**15
MAX_HOURLY_USD = 10_000.0
MAX_GPUS = 128
MAX_GPU_WATTS = 2000.0  # the most one GPU's power limit may be (today's largest are about 1,000 W)
EARLIEST_DATE = EARLIEST.date()  # the range every input time must fit (governor.domain.times)
LATEST_DATE = (LATEST - dt.timedelta(days=1)).date()


def _bounded_date(value: dt.date) -> dt.date:
    if not EARLIEST_DATE <= value <= LATEST_DATE:
        raise ValueError(f"{value.isoformat()} is outside {EARLIEST_DATE.isoformat()} .. {LATEST_DATE.isoformat()}")
    return value


PolicyDate = Annotated[dt.date, AfterValidator(_bounded_date)]
TagKey = Annotated[str, Field(min_length=1, max_length=128)]


class PolicyError(Exception):
    """A policy file that cannot be used; the message names the file, the field path and the reason."""


CommandName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class FleetPolicy(_Model):
    """What counts as the GPU fleet and which tags carry ownership; shared by every capability."""

    gpu_families: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9]*$")]] = Field(
        default_factory=lambda: list(DEFAULT_GPU_FAMILIES), min_length=1
    )
    owner_tag: TagKey = "owner"
    team_tag: TagKey = "team"
    exempt_tag: TagKey = "governor:exempt"
    keep_until_tag: TagKey = "governor:keep-until"
    checkpoint_command_tag: TagKey = "governor:checkpoint-command"
    checkpoint_commands: dict[CommandName, Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        default_factory=dict
    )
    fleet_tags: dict[Annotated[str, Field(min_length=1, max_length=128)], Annotated[str, Field(max_length=256)]] = (
        Field(default_factory=lambda: {"gpu-fleet": "true"}, min_length=1)
    )
    max_snooze_days: int = Field(7, ge=0, le=90)
    max_exemption_days: int = Field(90, ge=0, le=366)

    def carries_fleet_tags(self, tags: dict[str, str]) -> bool:
        """Whether a resource carries every ``fleet_tags`` pair: SendCommand is granted only on such instances, and
        ``network.scope: fleet`` judges such security groups."""
        return all(tags.get(key) == value for key, value in self.fleet_tags.items())

    def is_gpu_type(self, instance_type: str) -> bool:
        """``g5.xlarge`` is in family ``g``; ``gr6`` is not in ``g`` (the family is the letters before the digit)."""
        family = re.match(r"^([a-z]+)", instance_type or "")
        if not family:
            return False
        return family.group(1) in self.gpu_families

    def iam_instance_type_patterns(self) -> list[str]:
        """IAM ``StringLike`` values for ``ec2:InstanceType`` that match exactly what :meth:`is_gpu_type` accepts.

        IAM wildcards are ``*`` and ``?`` only, so ``g[0-9]*`` cannot be written; ``g0*`` ... ``g9*`` can, and unlike
        ``g*`` it does not also match ``gr6`` instances.
        """
        return [f"{family}{digit}*" for family in self.gpu_families for digit in "0123456789"]


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


class GpuPowerEntry(_Model):
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


class KubernetesCluster(_Model):
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
        return self

    def __hash__(self) -> int:  # frozen, but namespace_teams is a dict: hash what identifies the source
        return hash(
            (self.name, self.metric_source, self.prometheus_url, self.sigv4_region, self.node_label, self.selector)
        )


class IdlePolicy(_Model):
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
    reserved_capacity: Literal["report", "stop_if_open"] = "report"
    # Active GPU capacity reservations (On-Demand Capacity Reservations, Capacity Blocks) with capacity no instance
    # runs in: reported (a finding a day per reservation, the report's "paid for, unused" section), never cancelled.
    # off: not read (one DescribeCapacityReservations a sweep saved).
    unused_reservations: Literal["report", "off"] = "report"
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


class CheckpointBucketPolicy(_Model):
    """Where Spot jobs keep checkpoints, and how many old versions survive."""

    create: bool = True
    noncurrent_versions_to_keep: int = Field(3, ge=0, le=100)
    noncurrent_version_expiry_days: int = Field(7, ge=1, le=MAX_DAYS)


class SpotPolicy(_Model):
    """Turn the two-minute Spot warning into a checkpoint, a record, a message and, optionally, new capacity."""

    enforce: bool = False
    checkpoint_command: str = "systemctl kill --signal=SIGUSR1 training.service"
    checkpoint_timeout_seconds: int = Field(90, ge=10, le=110)
    on_rebalance: Literal["checkpoint", "record"] = "checkpoint"
    deregister_from_target_groups: bool = True
    complete_lifecycle_action: bool = True
    replacement: Literal["none", "spot", "on-demand"] = "none"
    fallback_instance_types: list[str] = Field(default_factory=list)
    fallback_zones: list[str] = Field(default_factory=list)
    # Opt-in: reserving fails the deploy unless the account keeps 100 unreserved (new accounts may have 10 in all).
    reserved_concurrency: int | None = Field(None, ge=1, le=100)
    checkpoint_bucket: CheckpointBucketPolicy = Field(default_factory=CheckpointBucketPolicy)
    exemptions: Exemptions = Field(default_factory=Exemptions)


class PriceEntry(_Model):
    on_demand: float = Field(gt=0, le=MAX_HOURLY_USD)
    spot: float | None = Field(None, gt=0, le=MAX_HOURLY_USD)
    gpus: int = Field(1, ge=1, le=MAX_GPUS)


class LifecyclePolicy(_Model):
    """Know who launched each GPU instance and what it costs; tag launches and keep usage sessions."""

    enforce: bool = False
    creator_tag: TagKey = "governor:creator"
    launched_at_tag: TagKey = "governor:launched-at"
    reconcile_schedule: Schedule = "rate(1 day)"
    use_price_list_api: bool = False
    # Savings at the price actually paid: "cost_explorer" reads each type's amortised cost per running hour (Savings
    # Plans, Reserved Instances and Capacity Blocks spread over the hours they cover) once per report, over the last
    # effective_rate_days (ce:GetCostAndUsage, USD 0.01 a request). Else savings use the Price List API / the table.
    effective_rates: Literal["none", "cost_explorer"] = "none"
    effective_rate_days: int = Field(30, ge=1, le=365)
    prices_as_of: PolicyDate = dt.date(2026, 11, 1)
    prices: dict[str, PriceEntry] = Field(
        default_factory=lambda: {
            "g4dn.xlarge": PriceEntry(on_demand=0.526, spot=0.21, gpus=1),
            "g4dn.12xlarge": PriceEntry(on_demand=3.912, spot=1.48, gpus=4),
            "g5.xlarge": PriceEntry(on_demand=1.006, spot=0.42, gpus=1),
            "g5.2xlarge": PriceEntry(on_demand=1.212, spot=0.48, gpus=1),
            "g5.12xlarge": PriceEntry(on_demand=5.672, spot=2.10, gpus=4),
            "g5.48xlarge": PriceEntry(on_demand=16.288, spot=6.20, gpus=8),
            "g6.xlarge": PriceEntry(on_demand=0.805, spot=0.35, gpus=1),
            "g6e.xlarge": PriceEntry(on_demand=1.861, spot=0.80, gpus=1),
            "p3.2xlarge": PriceEntry(on_demand=3.06, spot=0.92, gpus=1),
            "p3.8xlarge": PriceEntry(on_demand=12.24, spot=3.67, gpus=4),
            "p4d.24xlarge": PriceEntry(on_demand=32.7726, spot=11.57, gpus=8),
            "p5.48xlarge": PriceEntry(on_demand=55.04, spot=22.0, gpus=8),
            "trn1.32xlarge": PriceEntry(on_demand=21.50, spot=8.60, gpus=16),
            "inf2.xlarge": PriceEntry(on_demand=0.7582, spot=0.30, gpus=1),
            "dl1.24xlarge": PriceEntry(on_demand=13.11, spot=3.93, gpus=8),
        }
    )


class AuditPolicy(_Model):
    """The CloudTrail audit lake; ``enforce`` turns non-empty CIS monitoring queries into findings."""

    enforce: bool = False
    create_trail: bool = True
    existing_trail_arn: str | None = None
    existing_bucket_name: str | None = None
    organization_trail: bool = False
    organization_id: str | None = Field(None, pattern=r"^o-[a-z0-9]{10,32}$")
    accounts: list[Annotated[str, Field(pattern=r"^[0-9]{12}$")]] = Field(default_factory=list)
    transition_to_infrequent_access_days: int = Field(90, ge=30, le=MAX_DAYS)
    expire_after_days: int | None = Field(None, ge=1, le=MAX_DAYS)
    bytes_scanned_cutoff_per_query: int = Field(10 * 1024**3, ge=10 * 1024**2, le=1024**5)
    projection_start_date: PolicyDate = dt.date(2024, 1, 1)

    @model_validator(mode="after")
    def _existing_or_new(self) -> AuditPolicy:
        if not self.create_trail and not self.existing_bucket_name:
            raise ValueError("create_trail is false, so existing_bucket_name must name the trail's bucket")
        if self.organization_trail and not self.organization_id:
            raise ValueError("organization_trail needs organization_id (o-...)")
        if self.expire_after_days is not None and self.expire_after_days <= self.transition_to_infrequent_access_days:
            # S3 refuses a lifecycle rule whose expiration is not later than its transition
            raise ValueError("expire_after_days must be greater than transition_to_infrequent_access_days")
        return self


class ReportsPolicy(_Model):
    """Scheduled security and cost reports; ``enforce: false`` renders and archives them without sending."""

    enforce: bool = True
    daily_schedule: Schedule = "cron(0 7 * * ? *)"
    weekly_schedule: Schedule = "cron(0 7 ? * MON *)"
    top_rows: int = Field(10, ge=1, le=100)
    rightsizing_max_utilization: float = Field(30.0, gt=0, le=100)
    email_recipients: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(default_factory=list)


#: A Slack channel id (``C…`` public, ``G…`` private), for posting with the bot token.
SlackChannelId = Annotated[str, Field(pattern=r"^[CG][A-Z0-9]{2,30}$")]


class TeamRoute(_Model):
    slack_secret_name: str | None = None
    #: Post with the bot token (``interactions.bot_token_secret_name``) to this channel instead of the webhook.
    slack_channel: SlackChannelId | None = None
    email: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(default_factory=list)


class NotificationsPolicy(_Model):
    """Where findings go; ``enforce: false`` logs and archives them on the bus without sending to Slack or email."""

    enforce: bool = True
    slack_secret_name: str = "governor/slack-webhook"  # noqa: S105 - a secret's name, not its value
    #: Post with the bot token (``interactions.bot_token_secret_name``, scope ``chat:write``) to this channel id
    #: instead of the webhook: the governor then knows each message's ``ts`` and updates an idle episode's message
    #: in place (warned -> stopped) rather than posting again. Unset: the webhook, one post per message.
    slack_channel: SlackChannelId | None = None
    email_sender: str | None = Field(None, pattern=r"^[^@\s]+@[^@\s]+$")
    email_recipients: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(default_factory=list)
    min_severity: Literal["info", "warning", "critical"] = "info"
    #: What is posted the moment it happens; the rest waits for the team's daily report digest. ``actionable``:
    #: criticals, and idle / Spot / button findings (time-bound); ``critical``: criticals only; ``all``: everything.
    immediate: Literal["actionable", "critical", "all"] = "actionable"
    merge_window_minutes: int = Field(60, ge=0, le=24 * 60)
    teams: dict[str, TeamRoute] = Field(default_factory=dict)
    dashboard_url: str | None = None
    owner_email_domains: list[Annotated[str, Field(pattern=r"^([a-z0-9-]+\.)+[a-z]{2,}$")]] = Field(
        default_factory=list
    )


class BudgetsPolicy(_Model):
    """Optional monthly GPU budgets per team and per account, in USD: the report shows burn rate and month-end
    forecast, and the report function raises one finding per budget, month and threshold crossed (80 % and 100 %)."""

    teams: dict[Annotated[str, Field(min_length=1, max_length=64)], Annotated[float, Field(gt=0, le=1e9)]] = Field(
        default_factory=dict
    )
    #: Per AWS account (organisation mode): the 12-digit account id to its monthly budget in USD.
    accounts: dict[Annotated[str, Field(pattern=r"^\d{12}$")], Annotated[float, Field(gt=0, le=1e9)]] = Field(
        default_factory=dict, max_length=10_000
    )
    alert_thresholds: list[Annotated[int, Field(ge=1, le=1000)]] = Field(
        default_factory=lambda: [80, 100], max_length=5
    )

    @field_validator("alert_thresholds")
    @classmethod
    def _sorted_unique(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("alert_thresholds must not repeat a percentage")
        return sorted(value)


SlackUserId = Annotated[str, Field(pattern=r"^[UW][A-Z0-9]{2,30}$")]
Email = Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)]


def _time_zone(value: str) -> str:
    """An IANA zone name (``Europe/Berlin``); checked against the zone database when this machine has one."""
    import zoneinfo

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*", value):
        raise ValueError(f"{value!r} is not an IANA time zone name such as Europe/Berlin")
    if zoneinfo.available_timezones() and value not in zoneinfo.available_timezones():
        raise ValueError(f"{value!r} is not a known IANA time zone")
    return value


class TeamMembers(_Model):
    """Who belongs to a team (for acting on its instances from Slack) and the team's time zone ("tomorrow 09:00")."""

    members: list[Email] = Field(default_factory=list)
    timezone: Annotated[str, AfterValidator(_time_zone)] = "UTC"


class InteractionsPolicy(_Model):
    """The Slack buttons on idle warnings (Keep 4 h, Keep until tomorrow, Stop now) and on findings (Acknowledge).

    ``enforce: false`` verifies, authorises and records every click, and answers in Slack what it would have done;
    only ``enforce: true`` writes the snooze tag or asks the idle function to stop. ``buttons`` puts them on
    messages (switch it on once the Slack app's interactivity URL points at the endpoint, see docs/slack.md).
    """

    enforce: bool = False
    buttons: bool = False
    signing_secret_name: str = "governor/slack-signing-secret"  # noqa: S105 - a secret's name, not its value
    # Optional: a bot token (users:read.email) to resolve clicking users not listed in slack_users.
    bot_token_secret_name: str | None = None
    slack_users: dict[SlackUserId, Email] = Field(default_factory=dict)
    admins: list[Email] = Field(default_factory=list)
    teams: dict[Annotated[str, Field(min_length=1, max_length=64)], TeamMembers] = Field(default_factory=dict)
    keep_hours: int = Field(4, ge=1, le=24 * 7)
    morning_hour: int = Field(9, ge=0, le=23)
    # The public endpoint's throttle: at most this many requests at once (reserved concurrency, counted by the deploy's
    # preflight; only while ``buttons`` is on, since the endpoint exists only then). null: unthrottled.
    reserved_concurrency: int | None = Field(5, ge=1, le=100)

    def endpoint_concurrency(self) -> int:
        """The executions the public endpoint reserves: none while buttons are off (no endpoint is deployed)."""
        return (self.reserved_concurrency or 0) if self.buttons else 0


class LedgerPolicy(_Model):
    """How long decisions stay in the ledger before DynamoDB TTL removes them."""

    retention_days: int = Field(400, ge=1, le=MAX_DAYS)


class Policy(_Model):
    """The whole of ``governor.yaml``."""

    version: Literal[1] = 1
    fleet: FleetPolicy = Field(default_factory=FleetPolicy)
    idle: IdlePolicy = Field(default_factory=IdlePolicy)
    spot: SpotPolicy = Field(default_factory=SpotPolicy)
    lifecycle: LifecyclePolicy = Field(default_factory=LifecyclePolicy)
    audit: AuditPolicy = Field(default_factory=AuditPolicy)
    reports: ReportsPolicy = Field(default_factory=ReportsPolicy)
    notifications: NotificationsPolicy = Field(default_factory=NotificationsPolicy)
    ledger: LedgerPolicy = Field(default_factory=LedgerPolicy)
    budgets: BudgetsPolicy = Field(default_factory=BudgetsPolicy)
    interactions: InteractionsPolicy = Field(default_factory=InteractionsPolicy)
    if TYPE_CHECKING:  # declared in their packages (registry ``policy_section``), composed into ``Policy`` below
        network: NetworkPolicy = Field(default_factory=NetworkPolicy)
        keys: KeysPolicy = Field(default_factory=KeysPolicy)

    @model_validator(mode="after")
    def _channels_need_the_bot(self) -> Policy:
        """Posting to a channel id needs the bot token; a webhook needs none."""
        uses = [
            path
            for path, channel in (
                ("notifications.slack_channel", self.notifications.slack_channel),
                *(
                    (f"notifications.teams.{name}.slack_channel", t.slack_channel)
                    for name, t in self.notifications.teams.items()
                ),
            )
            if channel
        ]
        if uses and not self.interactions.bot_token_secret_name:
            raise ValueError(f"{uses[0]} posts with the Slack bot token: set interactions.bot_token_secret_name")
        return self

    @model_validator(mode="after")
    def _exemptions_outlive_no_record(self) -> Policy:
        """An exemption's end is counted from its recorded setting; a ledger that forgot the setting first would let
        the same tag start a new clock (``governor.domain.tagging``)."""
        if self.ledger.retention_days < self.fleet.max_exemption_days:
            raise ValueError(
                f"ledger.retention_days ({self.ledger.retention_days}) must be at least fleet.max_exemption_days "
                f"({self.fleet.max_exemption_days}): an exemption's end is counted from its recorded setting"
            )
        return self


def _composed(core: type[Policy]) -> type[Policy]:
    """``Policy`` with every section a capability declares in its own package (its registry entry's
    ``policy_section``, ``module:Model``) beside the sections above, each defaulting to its model's defaults."""
    from pydantic import create_model

    from governor.registry import REGISTRY

    sections: dict[str, Any] = {
        capability.section: (model, Field(default_factory=model))
        for capability in REGISTRY.values()
        if (model := capability.section_model) is not None
    }
    if not sections:
        return core
    clash = sorted(set(sections) & set(core.model_fields))
    if clash:
        raise TypeError(f"policy sections declared twice (policy.py and a capability's package): {clash}")
    composed: type[Policy] = create_model(
        "Policy", __base__=core, __module__=__name__, __doc__=core.__doc__, **sections
    )
    return composed


if not TYPE_CHECKING:  # type checkers see the sections above; a capability reads its own through its model
    Policy = _composed(Policy)


def _fields_at(location: tuple[Any, ...]) -> list[str]:
    """The field names of the section that holds ``location`` (for "did you mean"), or none when it is not a model."""
    model: Any = Policy
    for part in location[:-1]:
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [f.alias or name for name, f in model.model_fields.items()]
    return []


def policy_field(path: str) -> str:
    """``path`` (``"keys.secret_max_rotation_days"``) when it names a field of :class:`Policy`, else ValueError.

    Text that tells a person which setting to change says it through this, so a renamed or misspelt field fails the
    tests that render it instead of sending people to a setting that does not exist.
    """
    model: Any = Policy
    for part in path.split("."):
        fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
        if part not in fields:
            raise ValueError(f"governor.yaml has no field {path!r} ({part!r} is not one)")
        model = fields[part].annotation
    return path


def _format_error(source: str, error: ValidationError) -> str:
    import difflib

    problems = []
    for item in error.errors(include_input=False):
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        reason = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(item["loc"][-1]), _fields_at(item["loc"]), n=1)
            hint = f"did you mean '{close[0]}'?" if close else "check the spelling against governor.yaml"
            reason = f"unknown field ({hint})"
        problems.append(f"{path}: {reason}")
    return f"{source}: " + "; ".join(problems)


def parse_policy(data: Any, source: str = "governor.yaml") -> Policy:
    """Validate already-parsed YAML; raises :class:`PolicyError` with the field path on any problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: the top level must be a mapping of sections, not {type(data).__name__}")
    try:
        return Policy.model_validate(data)
    except ValidationError as error:
        raise PolicyError(_format_error(source, error)) from None
    except RecursionError:
        raise PolicyError(f"{source}: nested too deeply to be a policy") from None


def _strict_loader() -> Any:
    """PyYAML's safe loader, stricter in two ways that matter for a policy.

    A key written twice in one mapping is an error naming both lines (YAML 1.2 forbids it; PyYAML silently keeps the
    last, so ``enforce: false`` then ``enforce: true`` would enforce), and an impossible date (``2026-02-30``) is a
    YAML error with its line instead of a ``ValueError`` from deep inside the constructor.
    """
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                first: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # `<<: *anchor` keys may be overridden on purpose
                    try:
                        key = self.construct_object(key_node, deep=True)
                        hash(key)
                    except (TypeError, yaml.YAMLError):
                        continue  # the base constructor reports unhashable keys with their position
                    line = key_node.start_mark.line + 1
                    if key in first:
                        raise yaml.constructor.ConstructorError(
                            None,
                            None,
                            f"duplicate key {key!r} (first at line {first[key]})",
                            key_node.start_mark,
                        )
                    first[key] = line
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_timestamp(self, node: Any) -> Any:
            try:
                return super().construct_yaml_timestamp(node)
            except (ValueError, OverflowError) as error:
                raise yaml.constructor.ConstructorError(
                    None, None, f"invalid date {node.value!r} ({error})", node.start_mark
                ) from None

    StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", StrictLoader.construct_yaml_timestamp)
    return StrictLoader


def parse_policy_text(text: str, source: str = "governor.yaml") -> Policy:
    import yaml  # deploy-time and CLI only; Lambdas receive the policy as JSON

    try:
        data = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise PolicyError(f"{source}: {where}{problem}") from None
    except RecursionError:
        raise PolicyError(f"{source}: nested too deeply to be a policy") from None
    return parse_policy(data, source)


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; every failure is a :class:`PolicyError` naming the file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PolicyError(f"{file}: cannot read the policy file ({error.__class__.__name__}: {error})") from None
    return parse_policy_text(text, str(file))


DEFAULT_POLICY_FILE = "governor.yaml"
SHIPPED_DEFAULT = "the shipped default policy (report-only; documented in governor.yaml)"


def resolve_policy(path: str | Path | None) -> tuple[Policy, str]:
    """The policy a command runs with, and where it came from: the file given; else ``./governor.yaml``; else the
    shipped default, so ``governor report`` and ``backtest`` work from any directory.

    The shipped default is the model's own defaults, which the repository's ``governor.yaml`` documents field by
    field (a test keeps the two equal); it needs no data file, so any install finds it.
    """
    if path is not None:
        return load_policy(path), str(path)
    if Path(DEFAULT_POLICY_FILE).is_file():
        return load_policy(DEFAULT_POLICY_FILE), DEFAULT_POLICY_FILE
    return Policy(), SHIPPED_DEFAULT
