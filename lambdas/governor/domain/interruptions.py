"""The interruption record the Spot function keeps in the ledger, and the statistics the reports draw from it.

A ledger record shape shared by its writer (``governor.spot``: a Spot, capacity-reservation or Capacity Block
interruption) and its readers (the report's Spot figures, ``governor ledger``), so it lives in the shared domain: the
report's import does not load the Spot decisions, ports and explainer.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from governor.domain.model import Model

#: The ledger kind of an interruption record (key: the instance id).
RECORD_KIND = "interruption"
#: SSM command statuses after which a checkpoint command changes no more.
FINAL_COMMAND_STATUSES = ("Success", "Failed", "TimedOut", "Cancelled")
#: Record statuses after which the interruption is over: a warning that comes later announces another one.
ENDED = ("stopped", "terminated")


def interruption_key(instance_id: str, launched_at: dt.datetime, after: str | None = None) -> str:
    """What one interruption's checkpoint is sent at most once per (``Acting.intent``): the instance and its run.

    EC2 ends an instance's run at most once, so every notice announcing that end is about one interruption: a Spot
    warning however often and under whatever id it is delivered, an interruptible reservation's warning, a Capacity
    Block's expiry. EC2's ``LaunchTime``, which a stop and start or a hibernation and resume move, tells runs apart;
    ``after`` (the event id of the previous interruption, when its record says it is over) keeps two runs apart even
    where the launch time did not move. Both come from EC2 and the ledger, never from the event, so two deliveries
    racing each other compute the same key and only one of them claims the command.
    """
    return f"interruption:{instance_id}:{launched_at.isoformat()}" + (f":after:{after}" if after else "")


class InterruptionRecord(Model):
    """One interruption as kept in the ledger (kind ``interruption``, key the instance id); reports read these."""

    model_config = ConfigDict(extra="ignore")

    instance_id: str
    event_id: str
    warned_at: dt.datetime
    instance_action: str
    instance_type: str
    zone: str | None = None
    lifecycle: str = "spot"
    launched_at: dt.datetime
    age_seconds: float
    owner: str
    team: str
    enforced: bool
    checkpoint_command: str | None = None
    checkpoint_source: str | None = None
    checkpoint_attempted: bool = False
    checkpoint_delivered: bool = False
    command_id: str | None = None
    checkpoint_error: str | None = None
    checkpoint_status: str | None = None
    target_groups: list[str] = Field(default_factory=list)
    auto_scaling_group: str | None = None
    lifecycle_action: str | None = None
    replacement_id: str | None = None
    replacement_attempts: list[dict[str, Any]] = Field(default_factory=list)
    replacement_reason: str | None = None
    recovered: bool = False
    status: str = "interrupted"
    final_at: dt.datetime | None = None
    errors: list[str] = Field(default_factory=list)
    #: The interruption this record is about (:func:`interruption_key`); None on records written before it existed.
    interruption: str | None = None

    def same_run(self, launched_at: dt.datetime) -> bool:
        """Whether a notice about the instance, as EC2 reports it now, is about this record's interruption: the same
        run (launch time), and the interruption not over yet."""
        return self.launched_at == launched_at and self.status not in ENDED

    def next_key(self, launched_at: dt.datetime) -> str:
        """The key of this record's interruption when :meth:`same_run`, else of the one a new notice announces."""
        if self.same_run(launched_at):
            return self.interruption or interruption_key(self.instance_id, launched_at)
        return interruption_key(self.instance_id, launched_at, after=self.event_id if self.status in ENDED else None)

    def to_item(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_item(cls, item: Mapping[str, Any] | None) -> InterruptionRecord | None:
        """None for a missing or unreadable item (an old or foreign shape must not break the handler)."""
        if not item:
            return None
        try:
            return cls.model_validate(dict(item))
        except ValidationError:
            return None


class PoolWeek(Model):
    """Interruptions of one Spot pool (instance type in a zone) in one ISO week."""

    week: str
    instance_type: str
    zone: str
    interruptions: int


class InterruptionStats(Model):
    """What the reports show about Spot pools: where interruptions hit, how late in a run, and if checkpoints landed."""

    total: int
    by_pool_week: list[PoolWeek]
    mean_age_hours: float | None
    checkpoints_attempted: int
    checkpoints_delivered: int
    checkpoint_delivery_rate: float | None
    checkpoints_succeeded: int
    checkpoint_success_rate: float | None
    unreadable: int = 0


def iso_week(at: dt.datetime) -> str:
    """``2026-W49``: the weekly bucket of the reports (ISO weeks, Monday to Sunday, unambiguous across years)."""
    year, week, _ = at.isocalendar()
    return f"{year}-W{week:02d}"


def interruption_stats(items: Iterable[Mapping[str, Any]]) -> InterruptionStats:
    """Interruptions per instance type and zone per ISO week, mean age at interruption, checkpoint delivery rate.

    The delivery rate counts only warnings where a checkpoint was sent (enforcing); report-only records add to the
    counts but not to the rate. Success rate is over delivered checkpoints whose final SSM status is known.
    """
    records: list[InterruptionRecord] = []
    unreadable = 0
    for item in items:
        record = InterruptionRecord.from_item(item)
        if record is None:
            unreadable += 1
        else:
            records.append(record)
    pools = Counter((iso_week(r.warned_at), r.instance_type, r.zone or "unknown") for r in records)
    attempted = [r for r in records if r.checkpoint_attempted]
    delivered = [r for r in attempted if r.checkpoint_delivered]
    finished = [r for r in delivered if r.checkpoint_status in FINAL_COMMAND_STATUSES]
    succeeded = [r for r in finished if r.checkpoint_status == "Success"]
    return InterruptionStats(
        total=len(records),
        by_pool_week=[
            PoolWeek(week=w, instance_type=t, zone=z, interruptions=n)
            for (w, t, z), n in sorted(pools.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1], kv[0][2]))
        ],
        mean_age_hours=round(sum(r.age_seconds for r in records) / len(records) / 3600, 2) if records else None,
        checkpoints_attempted=len(attempted),
        checkpoints_delivered=len(delivered),
        checkpoint_delivery_rate=round(len(delivered) / len(attempted), 4) if attempted else None,
        checkpoints_succeeded=len(succeeded),
        checkpoint_success_rate=round(len(succeeded) / len(finished), 4) if finished else None,
        unreadable=unreadable,
    )
