"""The one typed definition of ``governor.yaml``.

Imported by ``infra/`` at ``cdk synth`` and by every Lambda at start-up, so a policy that synthesizes is a policy
the runtime accepts. Every section is report-only (``enforce: false``) unless the file says otherwise.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEFAULT_GPU_FAMILIES = ["p", "g", "trn", "inf", "dl"]


class PolicyError(Exception):
    """A policy file that cannot be used; the message names the file, the field path and the reason."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PortRange(_Model):
    """An inclusive TCP/UDP port range; written in YAML as ``22``, ``"2222-2223"`` or ``{from: 1, to: 2}``."""

    from_port: int = Field(alias="from", ge=0, le=65535)
    to_port: int = Field(alias="to", ge=0, le=65535)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _parse_short_forms(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("a port range is a number, 'FROM-TO' or {from, to}")
        if isinstance(value, int):
            return {"from": value, "to": value}
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", value)
            if not match:
                raise ValueError(f"'{value}' is not a port or a 'FROM-TO' range")
            low = int(match.group(1))
            return {"from": low, "to": int(match.group(2) or low)}
        return value

    @model_validator(mode="after")
    def _ordered(self) -> PortRange:
        if self.from_port > self.to_port:
            raise ValueError(f"range starts at {self.from_port}, after its end {self.to_port}")
        return self

    def overlaps(self, low: int, high: int) -> bool:
        return self.from_port <= high and low <= self.to_port

    def covers(self, low: int, high: int) -> bool:
        return self.from_port <= low and high <= self.to_port


class Exemptions(_Model):
    """Resources a policy reports on but never changes: by id, or by tag (``key: value``, ``"*"`` for any value)."""

    ids: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)

    def matches(self, resource_id: str, tags: dict[str, str]) -> bool:
        if resource_id in self.ids:
            return True
        return any(k in tags and (v == "*" or tags[k] == v) for k, v in self.tags.items())


class FleetPolicy(_Model):
    """What counts as the GPU fleet and which tags carry ownership; shared by every capability."""

    gpu_families: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9]*$")]] = Field(
        default_factory=lambda: list(DEFAULT_GPU_FAMILIES), min_length=1
    )
    owner_tag: str = "owner"
    team_tag: str = "team"
    exempt_tag: str = "governor:exempt"
    keep_until_tag: str = "governor:keep-until"
    checkpoint_command_tag: str = "governor:checkpoint-command"

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


class IdlePolicy(_Model):
    """Reclaim GPU instances that every signal says are idle, warning first; never a working machine."""

    enforce: bool = False
    schedule: str = "rate(15 minutes)"
    window_minutes: int = Field(120, ge=15, le=24 * 60)
    gpu_utilization_threshold: float = Field(5.0, gt=0, le=100)
    memory_change_tolerance_mib: float = Field(256.0, ge=0)
    cpu_utilization_threshold: float | None = Field(None, gt=0, le=100)
    network_bytes_threshold: float | None = Field(None, gt=0)
    min_samples_fraction: float = Field(0.8, gt=0, le=1)
    launch_grace_minutes: int = Field(30, ge=0)
    warning_minutes: int = Field(30, ge=0)
    on_demand_action: Literal["stop", "terminate"] = "stop"
    spot_action: Literal["stop", "terminate"] = "terminate"
    checkpoint_command: str | None = None
    checkpoint_timeout_seconds: int = Field(300, ge=30, le=3600)
    max_actions_per_sweep: int = Field(10, ge=0)
    max_fleet_percent: float = Field(20.0, ge=0, le=100)
    cloudwatch_agent_association: bool = False
    association_tag: dict[str, str] = Field(default_factory=lambda: {"governor:gpu-metrics": "true"})
    exemptions: Exemptions = Field(default_factory=Exemptions)


class CheckpointBucketPolicy(_Model):
    """Where Spot jobs keep checkpoints, and how many old versions survive."""

    create: bool = True
    noncurrent_versions_to_keep: int = Field(3, ge=0, le=100)
    noncurrent_version_expiry_days: int = Field(7, ge=1)


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
    reserved_concurrency: int = Field(5, ge=1, le=100)
    checkpoint_bucket: CheckpointBucketPolicy = Field(default_factory=CheckpointBucketPolicy)
    exemptions: Exemptions = Field(default_factory=Exemptions)


class NetworkPolicy(_Model):
    """Hold security groups and public addresses of the GPU fleet to policy, from the event, in seconds."""

    enforce: bool = False
    world_open_allowed_ports: list[PortRange] = Field(default_factory=list)
    training_ports: list[PortRange] = Field(default_factory=lambda: [PortRange.model_validate("2222-2223")])
    trusted_cidrs: list[str] = Field(default_factory=list)
    trusted_prefix_lists: list[Annotated[str, Field(pattern=r"^pl-[0-9a-f]+$")]] = Field(default_factory=list)
    protected_groups: Exemptions = Field(default_factory=Exemptions)
    public_ip_on_gpu: Literal["deny", "allow"] = "deny"
    sweep_schedule: str = "rate(1 day)"

    @field_validator("trusted_cidrs")
    @classmethod
    def _valid_cidrs(cls, values: list[str]) -> list[str]:
        for value in values:
            network = ipaddress.ip_network(value, strict=False)
            if network.prefixlen == 0:
                raise ValueError(f"{value} is the whole world; it cannot be a trusted source")
        return values


class KeysPolicy(_Model):
    """Keep KMS keys, IAM access keys and secrets rotated at most every N days, checking the period, not just on/off."""

    enforce: bool = False
    enforce_kms: bool | None = None
    enforce_access_keys: bool | None = None
    enforce_secrets: bool | None = None
    kms_max_rotation_days: int = Field(90, ge=90, le=2560)
    rotate_on_demand: bool = False
    access_key_max_age_days: int = Field(90, ge=1)
    access_key_warn_days: int = Field(76, ge=1)
    access_key_unused_days: int = Field(45, ge=1)
    secret_max_rotation_days: int = Field(90, ge=1, le=1000)
    schedule: str = "rate(1 day)"
    exemptions: Exemptions = Field(default_factory=Exemptions)

    @model_validator(mode="after")
    def _warn_before_max(self) -> KeysPolicy:
        if self.access_key_warn_days > self.access_key_max_age_days:
            raise ValueError("access_key_warn_days must not exceed access_key_max_age_days")
        return self

    def enforces(self, kind: Literal["kms", "access_keys", "secrets"]) -> bool:
        """A per-kind switch overrides the section's ``enforce``; unset, it inherits it."""
        override = {"kms": self.enforce_kms, "access_keys": self.enforce_access_keys, "secrets": self.enforce_secrets}[
            kind
        ]
        return self.enforce if override is None else override


class PriceEntry(_Model):
    on_demand: float = Field(gt=0)
    spot: float | None = Field(None, gt=0)
    gpus: int = Field(1, ge=1)


class LifecyclePolicy(_Model):
    """Know who launched each GPU instance and what it costs; tag launches and keep usage sessions."""

    enforce: bool = False
    creator_tag: str = "governor:creator"
    launched_at_tag: str = "governor:launched-at"
    reconcile_schedule: str = "rate(1 day)"
    use_price_list_api: bool = False
    prices_as_of: dt.date = dt.date(2026, 11, 1)
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
    transition_to_infrequent_access_days: int = Field(90, ge=30)
    expire_after_days: int | None = Field(None, ge=1)
    bytes_scanned_cutoff_per_query: int = Field(10 * 1024**3, ge=10 * 1024**2)
    projection_start_date: dt.date = dt.date(2024, 1, 1)

    @model_validator(mode="after")
    def _existing_or_new(self) -> AuditPolicy:
        if not self.create_trail and not self.existing_bucket_name:
            raise ValueError("create_trail is false, so existing_bucket_name must name the trail's bucket")
        if self.organization_trail and not self.organization_id:
            raise ValueError("organization_trail needs organization_id (o-...)")
        return self


class ReportsPolicy(_Model):
    """Scheduled security and cost reports; ``enforce: false`` renders and archives them without sending."""

    enforce: bool = False
    daily_schedule: str = "cron(0 7 * * ? *)"
    weekly_schedule: str = "cron(0 7 ? * MON *)"
    top_rows: int = Field(10, ge=1, le=100)
    rightsizing_max_utilization: float = Field(30.0, gt=0, le=100)
    email_recipients: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(default_factory=list)


class TeamRoute(_Model):
    slack_secret_name: str | None = None
    email: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(default_factory=list)


class NotificationsPolicy(_Model):
    """Where findings go; ``enforce: false`` logs and archives them on the bus without sending to Slack or email."""

    enforce: bool = False
    slack_secret_name: str = "governor/slack-webhook"  # noqa: S105 - a secret's name, not its value
    email_sender: str | None = Field(None, pattern=r"^[^@\s]+@[^@\s]+$")
    email_recipients: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(default_factory=list)
    min_severity: Literal["info", "warning", "critical"] = "info"
    merge_window_minutes: int = Field(60, ge=0, le=24 * 60)
    teams: dict[str, TeamRoute] = Field(default_factory=dict)
    dashboard_url: str | None = None


class BudgetsPolicy(_Model):
    """Optional monthly GPU budgets per team, in USD: the report shows burn rate and month-end forecast, and the
    report function raises one finding per team, month and threshold crossed (80 % and 100 % by default)."""

    teams: dict[Annotated[str, Field(min_length=1, max_length=64)], Annotated[float, Field(gt=0, le=1e9)]] = Field(
        default_factory=dict
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


class LedgerPolicy(_Model):
    """How long decisions stay in the ledger before DynamoDB TTL removes them."""

    retention_days: int = Field(400, ge=1)


class Policy(_Model):
    """The whole of ``governor.yaml``."""

    version: Literal[1] = 1
    fleet: FleetPolicy = Field(default_factory=FleetPolicy)
    idle: IdlePolicy = Field(default_factory=IdlePolicy)
    spot: SpotPolicy = Field(default_factory=SpotPolicy)
    network: NetworkPolicy = Field(default_factory=NetworkPolicy)
    keys: KeysPolicy = Field(default_factory=KeysPolicy)
    lifecycle: LifecyclePolicy = Field(default_factory=LifecyclePolicy)
    audit: AuditPolicy = Field(default_factory=AuditPolicy)
    reports: ReportsPolicy = Field(default_factory=ReportsPolicy)
    notifications: NotificationsPolicy = Field(default_factory=NotificationsPolicy)
    ledger: LedgerPolicy = Field(default_factory=LedgerPolicy)
    budgets: BudgetsPolicy = Field(default_factory=BudgetsPolicy)


def _format_error(source: str, error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        reason = item["msg"]
        if item["type"] == "extra_forbidden":
            reason = "unknown field (check the spelling against governor.yaml's documented fields)"
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


def parse_policy_text(text: str, source: str = "governor.yaml") -> Policy:
    import yaml  # deploy-time and CLI only; Lambdas receive the policy as JSON

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise PolicyError(f"{source}: {problem}{where}") from None
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
