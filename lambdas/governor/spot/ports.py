"""The ports the Spot handler acts through (instance reads, SSM Run Command, load balancers, Auto Scaling, relaunch)
and what each answers; ``spot/recovery.py`` and the shared adapters implement them on AWS, tests in memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from governor.domain.fleet import Instance


class InstanceReader(Protocol):
    def instance(self, instance_id: str) -> Instance | None: ...

    def in_reservation(self, reservation_id: str) -> list[Instance]: ...


class Delivery(Protocol):
    @property
    def delivered(self) -> bool: ...

    @property
    def command_id(self) -> str | None: ...

    @property
    def error(self) -> str | None: ...


class CheckpointSender(Protocol):
    """SSM Run Command, as the Spot handler needs it."""

    def send(self, instance_id: str, command: str, timeout_seconds: int, comment: str = "") -> Delivery: ...

    def status(self, command_id: str, instance_id: str) -> str: ...


@dataclass(frozen=True)
class Candidate:
    """One place to try a replacement: an instance type and, optionally, a zone (None: wherever the template says)."""

    instance_type: str
    zone: str | None = None


@dataclass(frozen=True)
class LaunchAttempt:
    instance_type: str
    zone: str | None
    error: str | None = None
    instance_id: str | None = None


@dataclass(frozen=True)
class Replacement:
    """The replacement's id, or why none was launched; every attempt is kept for the record."""

    instance_id: str | None
    attempts: tuple[LaunchAttempt, ...] = ()
    reason: str | None = None


@dataclass(frozen=True)
class Deregistration:
    """The target groups the instance left, and those listing it that it stayed in because they do not carry
    ``fleet.fleet_tags`` (a web service's group is not the fleet's to drain, whatever event claims otherwise)."""

    groups: list[str]
    left_alone: list[str]


@dataclass(frozen=True)
class LifecycleOutcome:
    """What happened to the instance's Auto Scaling lifecycle action (``completed`` lists the hooks continued)."""

    auto_scaling_group: str | None
    state: str | None
    completed: tuple[str, ...] = ()
    note: str = ""


class SpotRecovery(Protocol):
    """Load-balancer, Auto Scaling and relaunch operations; implemented by ``spot/recovery.py``."""

    def deregister(self, instance: Instance, fleet_tags: Mapping[str, str]) -> Deregistration: ...

    def complete_lifecycle_action(self, instance_id: str) -> LifecycleOutcome: ...

    def replace(
        self, instance: Instance, candidates: Sequence[Candidate], market: Literal["spot", "on-demand"]
    ) -> Replacement: ...
