"""The core of ``governor.yaml``: the sections every capability may read, and nothing of any capability.

``fleet`` (what the GPU fleet is, who owns what), ``pricing`` (what GPU instances cost), ``notifications`` (where
findings and reports go), ``audit``, ``ledger`` and ``budgets``. A capability's own section is declared in its package
(``governor.<name>.policy``) and reads nothing but itself and these; :mod:`governor.policy` composes the whole file
from the registry, above it. The shared domain, the typed actions and the capability declarations take a
:class:`CorePolicy` (or only the section they need), so nothing under the registry knows the composed ``Policy``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Annotated, Literal, NamedTuple, Protocol, TypeVar

from pydantic import AfterValidator, Field, field_validator, model_validator

from governor.domain.model import Model
from governor.domain.times import EARLIEST, LATEST
from governor.policy_types import MAX_DAYS, Section, TagKey
from governor.policy_types import Exemptions as Exemptions

DEFAULT_GPU_FAMILIES = ["p", "g", "trn", "inf", "dl"]

# Upper bounds for policy values, so that a policy that validates never overflows a function's date arithmetic or
# asks AWS for something it refuses. Each is far above any sensible setting; `governor validate --ranges` lists them.
MAX_HOURLY_USD = 10_000.0
MAX_GPUS = 128
EARLIEST_DATE = EARLIEST.date()  # the range every input time must fit (governor.domain.times)
LATEST_DATE = (LATEST - dt.timedelta(days=1)).date()


def _bounded_date(value: dt.date) -> dt.date:
    if not EARLIEST_DATE <= value <= LATEST_DATE:
        raise ValueError(f"{value.isoformat()} is outside {EARLIEST_DATE.isoformat()} .. {LATEST_DATE.isoformat()}")
    return value


PolicyDate = Annotated[dt.date, AfterValidator(_bounded_date)]


CommandName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class FleetPolicy(Section):
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


class PriceEntry(Section):
    on_demand: float = Field(gt=0, le=MAX_HOURLY_USD)
    spot: float | None = Field(None, gt=0, le=MAX_HOURLY_USD)
    #: GPUs an instance-hour is worth (0.125 for a g6f.large, an eighth of an L4); unset, the type's GPU facts say.
    gpus: float = Field(1, gt=0, le=MAX_GPUS)


class CurExport(Section):
    """Where the account's Cost and Usage Report 2.0 (AWS Data Exports) is queryable in Athena.

    The report runs one query a run in the audit lake's workgroup against ``database.table`` (the Glue table over the
    export's Parquet files, created by the user's crawler or AWS's Data Exports Athena integration) and reads the
    export's objects under ``s3://bucket/prefix``; the report role is granted exactly those. The export must include
    resource IDs (``line_item_resource_id``) for per-instance rates; without them the query finds nothing and the
    rates come from the next source."""

    database: str = Field(pattern=r"^[a-z0-9_]{1,255}$")
    table: str = Field(pattern=r"^[a-z0-9_]{1,255}$")
    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    prefix: str = Field("", pattern=r"^([A-Za-z0-9!_.*'()/-]{0,512}[A-Za-z0-9_.-])?$")
    # The Glue partition column of the export's BILLING_PERIOD=YYYY-MM folders (a crawler names it billing_period);
    # null when the table is not partitioned (the query then scans every billing period's files).
    billing_period_partition: str | None = Field("billing_period", pattern=r"^[a-z0-9_]{1,255}$")


class PricingPolicy(Section):
    """What GPU instances cost: the price table, the Price List API, and the rates actually paid (Cost Explorer, the
    CUR 2.0 table). Shared, not a capability's: the lifecycle function prices usage sessions with it, the idle sweep
    weighs and reports what an idle instance costs, and the report sums spend and savings."""

    use_price_list_api: bool = False
    # Savings at the price actually paid: "cost_explorer" reads each type's amortised cost per running hour (Savings
    # Plans, Reserved Instances and Capacity Blocks spread over the hours they cover) once per report, over the last
    # effective_rate_days (ce:GetCostAndUsage, USD 0.01 a request). Else savings use the Price List API / the table.
    # "cur" first reads the rate each instance actually paid from the CUR 2.0 table in Athena (``cur`` names it),
    # then Cost Explorer for types the table lacks, then the Price List API / the table.
    effective_rates: Literal["none", "cost_explorer", "cur"] = "none"
    effective_rate_days: int = Field(30, ge=1, le=365)
    cur: CurExport | None = None
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

    @model_validator(mode="after")
    def _cur_named(self) -> PricingPolicy:
        if self.effective_rates == "cur" and self.cur is None:
            raise ValueError("effective_rates is cur, so cur must name the CUR 2.0 table (database, table, bucket)")
        return self


class AuditPolicy(Section):
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


class BudgetsPolicy(Section):
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


class LedgerPolicy(Section):
    """How long decisions stay in the ledger before DynamoDB TTL removes them."""

    retention_days: int = Field(400, ge=1, le=MAX_DAYS)


#: A Slack channel id (``C…`` public, ``G…`` private), for posting with the bot token.
SlackChannelId = Annotated[str, Field(pattern=r"^[CG][A-Z0-9]{2,30}$")]


class TeamRoute(Section):
    slack_secret_name: str | None = None
    #: Post with the bot token (``interactions.bot_token_secret_name``) to this channel instead of the webhook.
    slack_channel: SlackChannelId | None = None
    email: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(default_factory=list)


class NotificationsPolicy(Section):
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
    #: What is posted the moment it happens; the rest waits for the channel's digest (every ``digest_hours``).
    #: ``due``: only what is due soon that a person can still change (a Spot or capacity interruption warning, the
    #: warning of an idle stop that will happen); ``actionable``: criticals, and every idle / Spot / button finding
    #: (time-bound); ``critical``: criticals only; ``all``: everything. ``due`` (the default) keeps a channel at a few
    #: posts a day whatever the fleet's size (issue 48); ``actionable`` was the default before.
    immediate: Literal["due", "actionable", "critical", "all"] = "due"
    #: Every this many hours (on the hour, UTC, from midnight: a divisor of 24) the notifier posts one digest per
    #: channel of what it held back since the last one: new problems, repeats counted, what was fixed or done.
    digest_hours: int = Field(8, ge=1, le=24)
    merge_window_minutes: int = Field(60, ge=0, le=24 * 60)
    teams: dict[str, TeamRoute] = Field(default_factory=dict)
    dashboard_url: str | None = None
    owner_email_domains: list[Annotated[str, Field(pattern=r"^([a-z0-9-]+\.)+[a-z]{2,}$")]] = Field(
        default_factory=list
    )

    @field_validator("digest_hours")
    @classmethod
    def _divides_the_day(cls, value: int) -> int:
        if 24 % value:
            raise ValueError(f"{value} does not divide 24: use 1, 2, 3, 4, 6, 8, 12 or 24, so every day is alike")
        return value

    @property
    def digest_schedule(self) -> str:
        """The digest's EventBridge Scheduler expression: on the hour every ``digest_hours``, from midnight UTC."""
        hours = "0" if self.digest_hours == 24 else f"0/{self.digest_hours}"
        return f"cron(0 {hours} * * ? *)"

    def slack_secret_names(self) -> list[str]:
        """Every Secrets Manager secret that may hold a webhook: the default channel and each team's."""
        names = {self.slack_secret_name}
        names.update(team.slack_secret_name for team in self.teams.values() if team.slack_secret_name)
        return sorted(names)


class CorePolicy(Protocol):
    """What every capability may read of the policy: the core sections. The composed ``governor.policy.Policy``
    is one (so is any stand-in holding these attributes); a capability's own section is read with :func:`section_of`."""

    @property
    def fleet(self) -> FleetPolicy: ...

    @property
    def pricing(self) -> PricingPolicy: ...

    @property
    def audit(self) -> AuditPolicy: ...

    @property
    def ledger(self) -> LedgerPolicy: ...

    @property
    def budgets(self) -> BudgetsPolicy: ...

    @property
    def notifications(self) -> NotificationsPolicy: ...


class ExemptingTags(NamedTuple):
    """Tags a capability's section exempts resources by (``idle.exemptions.tags``): who sets one is recorded, as for
    the fleet's own exemption tag (``governor.domain.tagging``); declared by the capability (``exempting_tags``)."""

    #: What it exempts from ("idle"), and the policy field listing the tags, as a finding's reason says them.
    what: str
    where: str
    tags: Mapping[str, str]


S = TypeVar("S", bound=Model)


def section_of(policy: CorePolicy, name: str, model: type[S]) -> S:
    """A capability's own section ``name`` of the composed policy, typed by its model: how code below the registry
    (its typed actions, its declaration) reads its own section without importing the composed ``Policy``."""
    found: S = getattr(policy, name)
    return found


def exemptions_outlive_no_record(policy: CorePolicy) -> None:
    """An exemption's end is counted from its recorded setting; a ledger that forgot the setting first would let the
    same tag start a new clock (``governor.domain.tagging``)."""
    if policy.ledger.retention_days < policy.fleet.max_exemption_days:
        raise ValueError(
            f"ledger.retention_days ({policy.ledger.retention_days}) must be at least fleet.max_exemption_days "
            f"({policy.fleet.max_exemption_days}): an exemption's end is counted from its recorded setting"
        )


#: Checks over the core sections together, run after every capability's (``governor.policy``).
CORE_CHECKS = (exemptions_outlive_no_record,)
