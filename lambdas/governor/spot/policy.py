"""The ``spot`` section of governor.yaml, declared here (the registry entry names it;
``governor.policy`` adds it to ``Policy``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from governor.policy_types import MAX_DAYS, Exemptions, Section


class CheckpointBucketPolicy(Section):
    """Where Spot jobs keep checkpoints, and how many old versions survive."""

    create: bool = True
    noncurrent_versions_to_keep: int = Field(3, ge=0, le=100)
    noncurrent_version_expiry_days: int = Field(7, ge=1, le=MAX_DAYS)


class SpotPolicy(Section):
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
