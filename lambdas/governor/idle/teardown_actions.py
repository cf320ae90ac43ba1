"""Snapshot every volume of a GPU instance stopped past ``idle.stopped.snapshot_and_terminate_after_days``, before it
is terminated (``governor.idle.actions.Terminate``, only once every snapshot completed). The IAM it takes is granted
only while that setting is on, and scoped in the idle construct (CreateSnapshots on GPU instance types; CreateTags on
snapshots only as part of CreateSnapshots)."""

from __future__ import annotations

from typing import ClassVar, Literal, Protocol

from governor.core_policy import CorePolicy, section_of
from governor.domain.actions import Acting, Action, Outcome
from governor.idle.policy import IdlePolicy


class _Snapshots(Protocol):
    def snapshot(self, instance_id: str, label: str) -> dict[str, str]: ...


class Snapshotting(Protocol):
    """The stopped instances' storage adapter (``governor.adapters.volumes.InstanceStorage``)."""

    @property
    def storage(self) -> _Snapshots | None: ...


class SnapshotVolumes(Action):
    """Every EBS volume of a stopped instance snapshotted at once, each snapshot with its volume's tags."""

    type: Literal["snapshot_volumes"] = "snapshot_volumes"
    volume_ids: list[str] | None = None
    reason: str | None = None

    IAM: ClassVar[frozenset[str]] = frozenset({"ec2:CreateSnapshots", "ec2:CreateTags"})

    @classmethod
    def permissions(cls, policy: CorePolicy) -> frozenset[str]:
        stopped = section_of(policy, "idle", IdlePolicy).stopped
        return cls.IAM if stopped.snapshot_and_terminate_after_days is not None else frozenset()

    def execute(self, aws: Snapshotting, at: Acting) -> Outcome:
        if aws.storage is None:
            raise RuntimeError("no storage adapter configured")
        taken = aws.storage.snapshot(at.resource, f"governor: every volume of {at.resource} before it is terminated")
        missing = sorted(set(self.volume_ids or []) - set(taken))
        listed = ", ".join(f"{volume} -> {snap}" for volume, snap in sorted(taken.items()))
        if missing:
            why = f"no snapshot of {', '.join(missing)}"
            return Outcome(ok=False, error_code="SnapshotIncomplete", message=why, done=f"not snapshotted: {why}")
        return Outcome(ok=True, done=f"snapshotted {len(taken)} volume(s): {listed}", data={"snapshots": taken})
