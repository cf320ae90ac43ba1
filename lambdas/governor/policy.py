"""The one typed definition of ``governor.yaml``.

Imported by ``infra/`` at ``cdk synth`` and by every Lambda at start-up, so a policy that synthesizes is a policy
the runtime accepts. Every section is report-only (``enforce: false``) unless the file says otherwise.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, ValidationError, field_validator, model_validator

from governor.domain.times import EARLIEST, LATEST
from governor.policy_types import MAX_DAYS as MAX_DAYS
from governor.policy_types import Exemptions as Exemptions
from governor.policy_types import PortRange as PortRange
from governor.policy_types import Schedule as Schedule
from governor.policy_types import Section as _Model
from governor.policy_types import TagKey as TagKey

if TYPE_CHECKING:
    from governor.idle.policy import IdlePolicy
    from governor.interactions.policy import InteractionsPolicy
    from governor.keys.policy import KeysPolicy
    from governor.lifecycle.policy import LifecyclePolicy
    from governor.network.policy import NetworkPolicy
    from governor.notifier.policy import NotificationsPolicy
    from governor.report.policy import ReportsPolicy
    from governor.spot.policy import SpotPolicy

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


class PolicyError(Exception):
    """A policy file that cannot be used; the message names the file, the field path and the reason."""


class PolicyWarning(UserWarning):
    """A policy that is valid today but says something a later release refuses (a deprecated key's old place).

    Raised with :func:`warnings.warn` while the policy is validated; ``governor validate`` prints each one and
    ``cdk synth`` shows each as a warning on the stack (:func:`policy_warnings` collects them)."""


@contextmanager
def policy_warnings() -> Iterator[list[str]]:
    """The :class:`PolicyWarning` messages raised inside the ``with`` block, each once, in order (filled when the
    block ends); other warnings go on as usual."""
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PolicyWarning)
        yield found
    for warning in caught:
        if issubclass(warning.category, PolicyWarning):
            if str(warning.message) not in found:
                found.append(str(warning.message))
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)


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


class PriceEntry(_Model):
    on_demand: float = Field(gt=0, le=MAX_HOURLY_USD)
    spot: float | None = Field(None, gt=0, le=MAX_HOURLY_USD)
    gpus: int = Field(1, ge=1, le=MAX_GPUS)


class CurExport(_Model):
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


class PricingPolicy(_Model):
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


class LedgerPolicy(_Model):
    """How long decisions stay in the ledger before DynamoDB TTL removes them."""

    retention_days: int = Field(400, ge=1, le=MAX_DAYS)


class Policy(_Model):
    """The whole of ``governor.yaml``."""

    version: Literal[1] = 1
    fleet: FleetPolicy = Field(default_factory=FleetPolicy)
    pricing: PricingPolicy = Field(default_factory=PricingPolicy)
    audit: AuditPolicy = Field(default_factory=AuditPolicy)
    ledger: LedgerPolicy = Field(default_factory=LedgerPolicy)
    budgets: BudgetsPolicy = Field(default_factory=BudgetsPolicy)
    if TYPE_CHECKING:  # declared in their packages (registry ``policy_section``), composed into ``Policy`` below
        lifecycle: LifecyclePolicy = Field(default_factory=LifecyclePolicy)
        network: NetworkPolicy = Field(default_factory=NetworkPolicy)
        keys: KeysPolicy = Field(default_factory=KeysPolicy)
        spot: SpotPolicy = Field(default_factory=SpotPolicy)
        interactions: InteractionsPolicy = Field(default_factory=InteractionsPolicy)
        notifications: NotificationsPolicy = Field(default_factory=NotificationsPolicy)
        reports: ReportsPolicy = Field(default_factory=ReportsPolicy)
        idle: IdlePolicy = Field(default_factory=IdlePolicy)

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        """A key at its old place (:func:`moved_keys`) is read at its new one, with a :class:`PolicyWarning` per key.

        Set at both places, it stays at the old one, where the section refuses it with its field path
        (``_format_error`` says why)."""
        if not isinstance(data, dict):
            return data
        moved = dict(data)
        for (old, key), new in moved_keys().items():
            section, target = moved.get(old), moved.get(new)
            target = {} if target is None else target
            if not (isinstance(section, dict) and key in section and isinstance(target, dict)):
                continue
            if key in target:
                continue  # both set: the old section refuses it
            moved[old] = {k: v for k, v in section.items() if k != key}
            moved[new] = {**target, key: section[key]}
            warnings.warn(f"{old}.{key} is deprecated: move it to {new}.{key}", PolicyWarning, stacklevel=2)
        return moved

    @model_validator(mode="after")
    def _capacity_offered_to_a_team(self) -> Policy:
        """``idle.reserved_capacity: offer`` names the team told of free capacity, and that team has a route."""
        if self.idle.reserved_capacity != "offer":
            return self
        team = self.idle.offer_capacity_to
        if not team:
            raise ValueError("idle.reserved_capacity is offer, so idle.offer_capacity_to must name the team to tell")
        if team not in self.notifications.teams:
            raise ValueError(
                f"idle.offer_capacity_to: {team!r} is not a team of notifications.teams "
                f"({', '.join(sorted(self.notifications.teams)) or 'none configured'})"
            )
        return self

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


@cache
def moved_keys() -> dict[tuple[str, str], str]:
    """(section, key) -> the section ``key`` moved to, from every section's ``moved_keys`` (kept for one release)."""
    return {
        (name, key): new
        for name, field in Policy.model_fields.items()
        if isinstance(section := field.annotation, type) and issubclass(section, _Model)
        for key, new in section.moved_keys.items()
    }


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


def _one_line(text: str) -> str:
    """``text`` with every line break or other unprintable character written as its escape (``\\n``).

    A policy key or value is the author's text and reaches the message (``fleet.a\\nb: unknown field``); the message
    is one line everywhere it is shown (``governor validate``, the synth's error), so a key holding a line break must
    not split it (found by ``tests/reliability/test_fuzz.py``).
    """
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _format_error(source: str, error: ValidationError) -> str:
    import difflib

    problems = []
    for item in error.errors(include_input=False):
        path = ".".join(_one_line(str(part)) for part in item["loc"]) or "(top level)"
        reason = _one_line(item["msg"].removeprefix("Value error, "))
        moved_to = moved_keys().get((str(item["loc"][0]), str(item["loc"][-1]))) if len(item["loc"]) == 2 else None
        if item["type"] == "extra_forbidden" and moved_to is not None:
            reason = f"moved to {moved_to}.{item['loc'][-1]}, which is set too: delete this one"
        elif item["type"] == "extra_forbidden":
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
    except UnicodeError:  # a validator's message quoting a lone UTF-16 surrogate, which pydantic cannot encode
        raise PolicyError(f"{source}: holds text that is not valid Unicode (a lone surrogate, \\ud800)") from None


def environment_policy(policy: Policy, sections: Iterable[str]) -> str:
    """A function's ``GOVERNOR_POLICY``: ``fleet``, ``ledger`` and the sections it reads (its registry entry's
    ``environment_sections``), each holding only what differs from the model's defaults; the function's
    :func:`parse_policy` fills in the rest. The stack writes it (``infra/constructs/function.py``) and so does the
    demo, so a section a function reads but its entry does not list is missed in both, never only when deployed."""
    data = policy.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return json.dumps({name: data.get(name, {}) for name in ("fleet", "ledger", *sections)}, separators=(",", ":"))


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
                    except TypeError:
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

        def construct_scalar(self, node: Any) -> Any:
            value = super().construct_scalar(node)
            if isinstance(value, str) and any("\ud800" <= char <= "\udfff" for char in value):
                # "\ud800\udc00" in a double-quoted string: YAML, unlike JSON, pairs no surrogates, and the validator
                # would fail on the lone ones with a UnicodeEncodeError (found by tests/reliability/test_fuzz.py)
                raise yaml.constructor.ConstructorError(
                    None, None, "a \\u escape names a lone UTF-16 surrogate, which is no character", node.start_mark
                )
            return value

        def construct_yaml_int(self, node: Any) -> Any:
            try:
                return super().construct_yaml_int(node)
            except ValueError as error:  # Python refuses int() of more than 4,300 digits (sys.int_info)
                raise yaml.constructor.ConstructorError(
                    None, None, f"number too long ({len(str(node.value))} characters)", node.start_mark
                ) from error

        def construct_yaml_timestamp(self, node: Any) -> Any:
            try:
                return super().construct_yaml_timestamp(node)
            except (ValueError, OverflowError) as error:
                raise yaml.constructor.ConstructorError(
                    None, None, f"invalid date {node.value!r} ({error})", node.start_mark
                ) from None

    StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", StrictLoader.construct_yaml_timestamp)
    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    return StrictLoader


def parse_policy_text(text: str, source: str = "governor.yaml") -> Policy:
    import yaml  # deploy-time and CLI only; Lambdas receive the policy as JSON

    try:
        data = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise PolicyError(f"{source}: {where}{_one_line(str(problem))}") from None
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
