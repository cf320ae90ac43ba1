"""Deploy-time settings only: names, the policy file to load, the layer to use, the audit region. Read from CDK
context, which ``infra.app_builder`` loads from ``cdk.json`` exactly as the CDK CLI does."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from governor.adapters.aws import spoke_role_name
from governor.registry import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
LAMBDAS_DIR = ROOT / "lambdas"
BUILD_DIR = ROOT / "build"
CDK_JSON = ROOT / "cdk.json"


class SettingsError(ValueError):
    """A context value that cannot produce a working deployment; the synth stops with the reason."""


#: How the StackSet is created: from a delegated administrator account (the hub's intended home) or from the
#: organisation's management account itself.
CallAs = Literal["DELEGATED_ADMIN", "SELF"]

_ORG_ID = r"^o-[a-z0-9]{10,32}$"
_TARGET_ID = r"^(ou-[a-z0-9]{4,32}-[a-z0-9]{8,32}|r-[a-z0-9]{4,32})$"
_PRINCIPAL = r"^arn:aws[a-z-]*:(iam|sts)::[0-9*]{1,12}:[A-Za-z0-9+=,.@_/*-]+$"
_REGION = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]$"
#: IAM role names hold 64 characters; each capability's spoke role is named ``<spoke_role_name>-<function>-<region>``
#: (role names are global, one StackSet instance per region); the longest region name has 14 characters and the
#: longest capability name acting in member accounts 9 (``lifecycle``).
LONGEST_REGION = 14
LONGEST_FUNCTION = max(len(name) for name, capability in REGISTRY.items() if capability.member_accounts)
SPOKE_ROLE_NAME_MAX = 64 - 1 - LONGEST_FUNCTION - 1 - LONGEST_REGION
#: Named IAM roles the stack creates: ``<stack_name>-<suffix>-<region>`` (infra.constructs.operators).
OPERATOR_ROLE_SUFFIXES = ("gpu-admin", "auditor")
#: CloudFormation stack names: a letter, then letters, digits and hyphens, at most 128 characters.
_STACK_NAME = r"^[A-Za-z][A-Za-z0-9-]{0,127}$"
#: EventBridge bus names (the organisation intake bus adds ``-org``).
_BUS_NAME = r"^[A-Za-z0-9._/-]{1,252}$"
#: The layer is built by ``make layer``; nothing else can serve (see infra.constructs.layer).
LAYER_CHOICES = ("build",)


def _distinct(value: tuple[str, ...], pattern: str, what: str, one: str) -> tuple[str, ...]:
    """``value`` if every item matches ``pattern`` and none repeats; else the error names the first bad item."""
    for index, item in enumerate(value):
        if not re.fullmatch(pattern, item):
            raise ValueError(f"[{index}] {item!r} is not {what}")
    if len(set(value)) != len(value):
        raise ValueError(f"lists {one} twice")
    return value


class OrganizationSettings(BaseModel):
    """Organisation mode (opt-in): the hub deploys a service-managed StackSet of spoke stacks to these OUs and regions.

    A deploy-time setting, not policy: it says where the governor is installed, not how it governs, and no function
    decides anything from it (the functions only learn the spoke role name and whether org mode is on).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=_ORG_ID, description="the organisation id, o-...")
    ou_ids: tuple[str, ...] = Field(min_length=1, max_length=100, description="target OUs (ou-...) or the root (r-...)")
    regions: tuple[str, ...] = Field(min_length=1, max_length=40, description="regions the spoke is deployed to")
    spoke_role_name: str = Field(
        "GovernorSpoke", min_length=1, max_length=SPOKE_ROLE_NAME_MAX, pattern=r"^[A-Za-z0-9+=,.@_-]+$"
    )
    call_as: CallAs = "DELEGATED_ADMIN"
    max_concurrent_percentage: int = Field(25, ge=1, le=100, description="accounts deployed at once, per region")
    failure_tolerance_percentage: int = Field(10, ge=0, le=100, description="failed accounts before a region stops")
    # The sweep fan-out (governor.fanout): one SQS message per (account, region) for every scheduled sweep.
    sweep_accounts: tuple[str, ...] = Field(
        (), max_length=5000, description="accounts to sweep; empty: the ACTIVE accounts of ou_ids (Organizations)"
    )
    sweep_concurrency: int = Field(10, ge=2, le=1000, description="targets swept at once (maximum_concurrency)")
    sweep_attempts: int = Field(3, ge=1, le=10, description="deliveries of a target before it becomes a finding")
    breaker_targets: int = Field(5, ge=1, le=10000, description="open per-target breakers that hold every target")
    # Reserve the fleet tag keys and governor:* to the governor's roles and these principals (issue 33): a service
    # control policy on ou_ids (infra/constructs/reserved_tags.py). The hub must be allowed to manage SCPs.
    reserve_tags: bool = False
    tag_admins: tuple[str, ...] = Field(
        (), max_length=50, description="principal ARN patterns (arn:aws:iam::*:role/PlatformAdmin) that keep the keys"
    )

    @field_validator("ou_ids")
    @classmethod
    def _targets(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _distinct(value, _TARGET_ID, "an OU id (ou-xxxx-xxxxxxxx) or a root id (r-xxxx)", "an OU")

    @field_validator("sweep_accounts")
    @classmethod
    def _accounts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _distinct(value, r"^\d{12}$", "a 12-digit account id", "an account")

    @field_validator("tag_admins")
    @classmethod
    def _admins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _distinct(
            value, r"^arn:aws[a-z-]*:(iam|sts)::[0-9*]{1,12}:[A-Za-z0-9+=,.@_/*-]+$", "an IAM ARN", "an ARN"
        )

    @field_validator("regions")
    @classmethod
    def _regions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _distinct(value, _REGION, "a region name such as us-east-1", "a region")

    def spoke_role(self, region: str, function: str) -> str:
        """One capability's spoke role in one region (IAM names are global, so each region's instance has its own)."""
        return spoke_role_name(self.spoke_role_name, function, region)

    @classmethod
    def from_context(cls, value: object) -> OrganizationSettings | None:
        """``None`` (organisation mode off) unless the ``organization`` context is set; errors name the field path."""
        if value in (None, "", False, "false"):
            return None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as error:
                raise SettingsError(f"context organization: not a JSON object ({error})") from None
        if not isinstance(value, dict):
            raise SettingsError("context organization: expected an object with id, ou_ids and regions")
        try:
            return cls.model_validate(value)
        except ValidationError as error:
            first = error.errors()[0]
            path = ".".join(str(part) for part in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            raise SettingsError(f"context organization.{path}: {message}") from None


@dataclass(frozen=True)
class Settings:
    """Context values (``cdk.json`` or ``-c key=value``) with safe defaults for local synth.

    ``audit_region`` names the one region that holds the multi-region trail, the audit lake and the reports; stacks
    in other regions deploy only the regional enforcers, so a fleet in N regions has one trail, not N.
    """

    stack_name: str = "GpuFleetGovernor"
    policy_file: Path = ROOT / "governor.yaml"
    bus_name: str = "governor"
    layer: str = "build"
    #: The folder holding ``layer/`` and ``layer-manifest.json`` (``make layer`` writes ``build/``).
    layer_build: Path = BUILD_DIR
    log_retention_days: int = 90
    region: str | None = None
    audit_region: str | None = None
    organization: OrganizationSettings | None = None
    #: Only ``app.py`` (the CDK CLI's entry) synthesizes a deployable app: it needs the verified layer build. The
    #: tests, ``governor demo`` and the benchmarks inspect the template with a placeholder layer.
    deployable: bool = False

    @property
    def layer_dir(self) -> Path:
        return self.layer_build / "layer"

    @property
    def layer_manifest(self) -> Path:
        return self.layer_build / "layer-manifest.json"

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
        if region is not None and not re.fullmatch(_REGION, region):
            raise SettingsError(f"context region: {region!r} is not a region name such as us-east-1")
        if audit_region is not None and not re.fullmatch(_REGION, audit_region):
            raise SettingsError(f"context audit_region: {audit_region!r} is not a region name such as us-east-1")
        account = _text(get("account"))
        if account is not None and not re.fullmatch(r"\d{12}", account):
            raise SettingsError(f"context account: {account!r} is not a 12-digit account id")
        layer = _text(get("layer")) or defaults.layer
        if layer not in LAYER_CHOICES:
            raise SettingsError(
                f"context layer: {layer!r} is not supported; only 'build' (make layer) is: the public Powertools "
                "layer has no slack_sdk, PyYAML or matplotlib, which notifications, policy loading and reports import"
            )
        layer_build = _text(get("layer_build"))
        settings = cls(
            stack_name=_text(get("stack_name")) or defaults.stack_name,
            policy_file=(ROOT / str(policy)) if policy else defaults.policy_file,
            bus_name=_text(get("bus_name")) or defaults.bus_name,
            layer=layer,
            layer_build=(ROOT / layer_build) if layer_build else defaults.layer_build,
            log_retention_days=_number(get("log_retention_days"), "log_retention_days", defaults.log_retention_days),
            region=region,
            audit_region=audit_region,
            organization=OrganizationSettings.from_context(get("organization")),
        )
        settings.check_names()
        return settings

    def check_names(self) -> None:
        """Names AWS would refuse at deploy time stop the synth here, naming the setting and the limit."""
        if not re.fullmatch(_STACK_NAME, self.stack_name):
            raise SettingsError(
                f"context stack_name: {self.stack_name!r} must start with a letter and hold only letters, digits and "
                "hyphens, at most 128 characters (CloudFormation)"
            )
        region_length = len(self.region) if self.region else LONGEST_REGION
        longest = max(OPERATOR_ROLE_SUFFIXES, key=len)
        limit = 64 - 2 - len(longest) - region_length
        if len(self.stack_name) > limit:
            where = f"in {self.region}" if self.region else f"in a region of {LONGEST_REGION} characters"
            raise SettingsError(
                f"context stack_name: {len(self.stack_name)} characters is too long: the operator role "
                f"'{self.stack_name}-{longest}-{self.region or '<region>'}' must fit IAM's 64 characters, so "
                f"stack_name may have at most {limit} {where}"
            )
        if not re.fullmatch(_BUS_NAME, self.bus_name):
            raise SettingsError(
                f"context bus_name: {self.bus_name!r} must be 1-252 letters, digits or . _ / - (EventBridge)"
            )


def _number(value: object, name: str, default: int) -> int:
    if value in (None, ""):
        return default
    try:
        return int(str(value))
    except ValueError:
        raise SettingsError(f"context {name}: {value!r} is not a whole number") from None


def _text(value: object) -> str | None:
    return str(value) if value not in (None, "") else None
