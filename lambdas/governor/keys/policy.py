"""The ``keys`` section of governor.yaml, declared here (the registry entry names it; ``governor.policy`` adds it
to ``Policy``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from governor.policy_types import MAX_DAYS, Exemptions, Schedule, Section


class KeysPolicy(Section):
    """Keep KMS keys, IAM access keys and secrets rotated at most every N days, checking the period, not just on/off."""

    enforce: bool = False
    enforce_kms: bool | None = None
    enforce_access_keys: bool | None = None
    enforce_secrets: bool | None = None
    kms_max_rotation_days: int = Field(90, ge=90, le=2560)
    rotate_on_demand: bool = False
    access_key_max_age_days: int = Field(90, ge=1, le=MAX_DAYS)
    access_key_warn_days: int = Field(76, ge=1, le=MAX_DAYS)
    access_key_unused_days: int = Field(45, ge=1, le=MAX_DAYS)
    secret_max_rotation_days: int = Field(90, ge=1, le=1000)
    schedule: Schedule = "rate(1 day)"
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
