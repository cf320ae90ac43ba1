"""The state of one Kubernetes reclaim between sweeps: cordoned -> drained -> removing (NodeClaim deleted, or the
instance terminated in its node group) -> gone, or no-path / gave-up. Pure.

A drain spans sweeps: a PodDisruptionBudget refuses an eviction, an API call fails (HTTP 500, a timeout), Karpenter
takes minutes to remove a node. What was done and why is kept in the ledger (kind :data:`DRAIN_KIND`, one item per
instance), not on the instance: the ledger is read in one query a sweep, written conditionally, and only the
governor writes it, whereas an instance tag can be written by anyone allowed ``ec2:CreateTags`` (house rule 5b) and
goes with the instance. The next sweep reads the item and resumes where the drain stopped, never starting over.

Bounded: after :data:`MAX_ATTEMPTS` consecutive passes without progress, or :data:`MAX_AGE` after the cordon, the
drain gives up: it un-cordons the node (only when the governor cordoned it) and says so. A finding is made per real
transition, with an id derived from the drain and its state, so retries post nothing twice; a drain that cannot go
on (a PodDisruptionBudget, a node with no reclaim path) says so on every pass until someone acts.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any, Literal

DRAIN_KIND = "idle-drain"
#: Consecutive passes (sweeps, Stop now clicks) that make no progress before the drain gives up.
MAX_ATTEMPTS = 4
#: How long after its start a drain may stay unfinished before it gives up.
MAX_AGE = dt.timedelta(hours=2)
#: How long a finished drain's record is kept (the ledger's TTL).
KEEP = dt.timedelta(days=14)
#: Steps kept in the item's history (the ledger's decisions keep every pass).
HISTORY = 40

State = Literal["started", "cordoned", "drained", "removing", "gone", "no-path", "gave-up"]
#: States in which the drain goes on at the next pass.
ACTIVE: frozenset[str] = frozenset({"started", "cordoned", "drained", "removing", "no-path"})
#: States in which the node may be cordoned by the governor (undone when it gives up).
CORDONED: frozenset[str] = frozenset({"cordoned", "drained"})


@dataclass(frozen=True)
class Drain:
    """One instance's reclaim through its cluster: where it stands, why it stopped, and every step so far."""

    instance_id: str
    cluster: str
    started_at: dt.datetime
    state: State = "started"
    node: str | None = None
    owner: str | None = None
    pool: str | None = None
    #: The governor cordoned the node (so giving up un-cordons it); False when it was unschedulable already.
    cordoned_by_us: bool = False
    #: The governor un-cordoned it again (giving up, or its reclaim path gone).
    uncordoned: bool = False
    #: Why the last pass stopped short (a PodDisruptionBudget, an API error, a missing reclaim path), or None.
    problem: str | None = None
    blocked_by_budget: bool = False
    #: Consecutive passes without progress; reset by any step forward.
    attempts: int = 0
    passes: int = 0
    last_event: str | None = None
    updated_at: dt.datetime | None = None
    #: Where the drain stood when the last pass began: what tells a transition from a repeat.
    prior_state: str | None = None
    prior_problem: str | None = None
    history: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def step(self, at: dt.datetime, what: str, *, ok: bool = True, reason: str | None = None) -> Drain:
        """The drain with one step (done or refused, and why) added to its history."""
        entry: dict[str, Any] = {"at": at.isoformat(), "step": what, "ok": ok}
        if reason:
            entry["reason"] = reason
        return replace(self, history=(*self.history, entry)[-HISTORY:])

    def to_item(self) -> dict[str, Any]:
        at = self.updated_at or self.started_at
        return {
            "instance_id": self.instance_id,
            "cluster": self.cluster,
            "started_at": self.started_at.isoformat(),
            "state": self.state,
            "node": self.node,
            "owner": self.owner,
            "pool": self.pool,
            "cordoned_by_us": self.cordoned_by_us,
            "uncordoned": self.uncordoned,
            "problem": self.problem,
            "blocked_by_budget": self.blocked_by_budget,
            "attempts": self.attempts,
            "passes": self.passes,
            "last_event": self.last_event,
            "updated_at": at.isoformat(),
            "prior_state": self.prior_state,
            "prior_problem": self.prior_problem,
            "history": list(self.history),
            "expires_at": int((at + KEEP).timestamp()),
        }

    @classmethod
    def from_item(cls, item: dict[str, Any] | None) -> Drain | None:
        if not item or not item.get("instance_id") or not item.get("started_at"):
            return None
        state = str(item.get("state") or "started")
        return cls(
            instance_id=str(item["instance_id"]),
            cluster=str(item.get("cluster") or ""),
            started_at=dt.datetime.fromisoformat(str(item["started_at"])),
            state=state if state in (*ACTIVE, "gone", "gave-up") else "started",  # type: ignore[arg-type]
            node=item.get("node") or None,
            owner=item.get("owner") or None,
            pool=item.get("pool") or None,
            cordoned_by_us=bool(item.get("cordoned_by_us")),
            uncordoned=bool(item.get("uncordoned")),
            problem=item.get("problem") or None,
            blocked_by_budget=bool(item.get("blocked_by_budget")),
            attempts=int(item.get("attempts") or 0),
            passes=int(item.get("passes") or 0),
            last_event=item.get("last_event") or None,
            updated_at=dt.datetime.fromisoformat(str(item["updated_at"])) if item.get("updated_at") else None,
            prior_state=item.get("prior_state") or None,
            prior_problem=item.get("prior_problem") or None,
            history=tuple(item.get("history") or ()),
        )


def begin(stored: Drain | None, instance_id: str, cluster: str, now: dt.datetime) -> Drain:
    """The drain to go on with: the stored one while it is active, else a new one starting now."""
    if stored is not None and stored.active and stored.cluster == cluster:
        return stored
    return Drain(instance_id, cluster, now)


def give_up_reason(drain: Drain, now: dt.datetime) -> str | None:
    """Why the drain must stop trying (too many passes without progress, or too long), or None."""
    if drain.state == "no-path":
        return None  # nothing was changed: it says so every pass until someone acts
    if drain.state != "removing" and drain.attempts >= MAX_ATTEMPTS:
        return f"{drain.attempts} passes in a row made no progress ({drain.problem or 'no reason recorded'})"
    if now - drain.started_at >= MAX_AGE:
        hours = MAX_AGE.total_seconds() / 3600
        waiting = "its owner has not removed the node" if drain.state == "removing" else drain.problem
        return f"not finished {hours:g} h after it started ({waiting or 'no reason recorded'})"
    return None


def begun(drain: Drain, event_id: str, now: dt.datetime) -> Drain:
    """The drain as a pass begins: counted, stamped, and where it stood kept to tell a transition from a repeat."""
    return replace(
        drain,
        passes=drain.passes + 1,
        last_event=event_id,
        updated_at=now,
        prior_state=drain.state if drain.passes else None,
        prior_problem=drain.problem,
    )


def finding_of(drain: Drain, instance_type: str) -> tuple[str, str] | None:
    """The title of the finding the last pass owes the owner, and the key its id derives from; None when nothing
    happened worth telling (a drain waiting on its owner, unchanged). Blocked and path-less drains say so on every
    pass (each pass its own key); every other state once per drain."""
    name = f"Idle GPU node {drain.instance_id} ({instance_type}) of cluster {drain.cluster}"
    start = drain.started_at.isoformat()
    repeats = drain.state == "no-path" or (drain.problem is not None and drain.state in (*CORDONED, "started"))
    if not repeats and drain.prior_state == drain.state and drain.prior_problem == drain.problem:
        return None
    key = f"idle-drain#{start}#{drain.state}" + (f"#{drain.passes}" if repeats else "")
    if drain.state == "gone":
        return f"{name} terminated: drained and removed by its owner", key
    if drain.state == "removing":
        return f"{name} drained; its owner is removing it (not yet terminated)", key
    if drain.state == "no-path":
        return f"{name} not reclaimed: {drain.problem or 'its reclaim path does not exist'}", key
    if drain.state == "gave-up":
        undone = "un-cordoned" if drain.uncordoned else "node left as it was"
        return f"{name}: drain given up and {undone} ({drain.problem or 'no reason recorded'})", key
    if drain.blocked_by_budget:
        return f"{name} drain blocked by a PodDisruptionBudget: node stays cordoned, retried next sweep", key
    if drain.problem and drain.state == "started":
        return f"{name} drain not started, node not cordoned: {drain.problem}; retried next sweep", key
    if drain.problem:
        return f"{name} drain stopped at {drain.state}: {drain.problem}; resumed next sweep", key
    return None


def summary(drain: Drain) -> str:
    """One sentence of where the drain stands, for the ledger and the action's outcome."""
    where = f"drain of node {drain.node or '(not found)'} in cluster {drain.cluster}: {drain.state}"
    if drain.problem:
        where += f" ({drain.problem})"
    if drain.active and drain.state != "no-path":
        where += f"; attempt {drain.attempts} of {MAX_ATTEMPTS} without progress, resumed next sweep"
    return where
