"""``governor status --table NAME``: the GPU fleet as the idle sweep sees it, one line per instance.

What ``sky status`` shows for autostop, for a whole fleet: owner, team, type, state, how long it has been idle, when
its owner was warned, what is due (a stop, a report, or the owner's snooze) and, for an instance that is not idle,
why (busy, no GPU data, grace period, exempt, held by the circuit breaker). Read-only, from three ledger reads: the
sweep's marks, the last sweep's decisions and its summary item, plus (in a single account) one paginated
DescribeInstances for the live state and tags. An organisation target (``--target ACCOUNT/REGION``) is shown from the
ledger alone, since the operator's credentials cannot describe another account's instances; a target the ledger has
never seen swept is an error, not an empty fleet.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND, LAST_SWEEP_KIND, Breaker
from governor.domain.escape import terminal_text
from governor.domain.facts import owner_of
from governor.domain.fleet import UNKNOWN, Instance, ownership, snoozed_until
from governor.domain.times import parse_time
from governor.idle.domain import MARK_KIND, Mark, sweep_interval
from governor.idle.purchase import reclaim_action, report_only_reason
from governor.policy import Policy

#: Statuses of the sweep's per-instance decisions that mean "not idle now" (the reason is the decision's first).
NOT_IDLE = ("busy", "unmonitored", "stalled", "grace", "exempt", "snoozed")


class Ledger(Protocol):
    def get_item(self, kind: str, key: str) -> dict[str, Any] | None: ...

    def query_kind(self, kind: str, since: dt.datetime | None = None) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class FleetRow:
    """One GPU instance: who, what, and where it stands in the idle sweep's mark-then-act."""

    instance: str
    owner: str
    team: str
    type: str
    state: str
    status: str
    idle_minutes: int | None
    warned_at: str | None
    due: str | None
    why_not_idle: str | None


@dataclass(frozen=True)
class LastSweep:
    event_id: str
    judged_at: dt.datetime
    instances: int


def clock() -> dt.datetime:
    """Now (tests replace it to read a simulated fleet at its own time)."""
    return dt.datetime.now(dt.UTC)


def _minutes(since: dt.datetime, now: dt.datetime) -> int:
    return max(0, int((now - since).total_seconds() // 60))


def _short(at: dt.datetime | None) -> str | None:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M") if at else None


def fleet_rows(
    live: Sequence[Instance] | None,
    decisions: Iterable[Mapping[str, Any]],
    marks: Mapping[str, Mark],
    breaker: Breaker,
    policy: Policy,
    now: dt.datetime,
) -> list[FleetRow]:
    """Every instance the live read, the last sweep or a mark knows, most urgent first (soonest due, longest idle).

    ``live`` is None when the fleet cannot be described (an organisation target): owner, team and type then come from
    the evidence the sweep recorded.
    """
    by_id = {i.id: i for i in live or ()}
    swept = {str(d["resource"]): d for d in decisions}
    warning = dt.timedelta(minutes=policy.idle.warning_minutes)
    rows: list[FleetRow] = []
    for instance_id in sorted({*by_id, *swept, *marks}):
        instance, decision, mark = by_id.get(instance_id), swept.get(instance_id, {}), marks.get(instance_id)
        evidence: Mapping[str, Any] = decision.get("evidence") or {}
        status = str(evidence.get("status") or "not swept")
        if instance is not None:
            who = ownership(instance.tags, policy.fleet)
            owner, team, kind, state = owner_of(who.owner).name, who.team, instance.type, instance.state
        else:
            owner = owner_of(evidence.get("owner")).name  # the one name the report and messages give them
            team = str(evidence.get("team") or UNKNOWN)
            kind = str(evidence.get("instance_type") or UNKNOWN)
            state = "running at last sweep" if decision else UNKNOWN
        snooze = snoozed_until(instance.tags, policy.fleet, now) if instance is not None else None
        due: str | None = None
        if snooze is not None:
            due = f"snoozed until {_short(snooze)}"
        elif mark is not None and mark.reported_at is not None:
            due = f"reported {_short(mark.reported_at)} (report-only)"
        elif mark is not None and mark.warned_at is not None:
            verb: str = "stop" if instance is None else reclaim_action(instance, policy.idle)
            if not policy.idle.enforce or (instance is not None and report_only_reason(instance, policy.idle)):
                verb = f"report (would {verb})"
            due = f"{verb} at {_short(mark.warned_at + warning)}"
        why: str | None = None
        if breaker.open and instance_id in breaker.held:
            why = "held by the idle circuit breaker (governor idle status)"
        elif state not in ("running", "running at last sweep", UNKNOWN):
            why = state
        elif status in NOT_IDLE:
            reasons = decision.get("reasons") or []
            why = f"{status}: {reasons[0]}" if reasons else status
        rows.append(
            FleetRow(
                instance=instance_id,
                owner=owner,
                team=team,
                type=kind,
                state=state,
                status=status,
                idle_minutes=_minutes(mark.idle_since, now) if mark is not None else None,
                warned_at=_short(mark.warned_at) if mark is not None else None,
                due=due,
                why_not_idle=why,
            )
        )
    return sorted(rows, key=lambda r: (r.due is None, r.due or "", -(r.idle_minutes or -1), r.instance))


def last_sweep(ledger: Ledger) -> LastSweep | None:
    item = ledger.get_item(LAST_SWEEP_KIND, BREAKER_KEY)
    judged = parse_time(item.get("judged_at")) if item else None
    if item is None or judged is None:
        return None
    return LastSweep(str(item.get("event_id", "")), judged, int(item.get("instances", 0) or 0))


def sweep_decisions(ledger: Ledger, sweep: LastSweep | None, policy: Policy, now: dt.datetime) -> list[dict[str, Any]]:
    """The last sweep's per-instance idle decisions (one ledger query over the last few sweep intervals)."""
    if sweep is None:
        return []
    # Decisions are stamped with the wall clock when recorded; the sweep judges at its event's time (a simulated day
    # runs ahead of it): the earliest of the three bounds the query.
    written = min(sweep.judged_at, now, dt.datetime.now(dt.UTC))
    since = written - 3 * sweep_interval(policy.idle) - dt.timedelta(hours=1)
    return [
        item
        for item in ledger.query_kind("decision", since)
        if item.get("policy") == "idle"
        and item.get("event_id") == sweep.event_id
        and str(item.get("resource", "")).startswith("i-")
    ]


def load_marks(ledger: Ledger) -> dict[str, Mark]:
    marks: dict[str, Mark] = {}
    for item in ledger.query_kind(MARK_KIND):
        mark, instance_id = Mark.from_item(item), item.get("instance_id")
        if mark is not None and isinstance(instance_id, str):
            marks[instance_id] = mark
    return marks


def render(rows: Sequence[FleetRow], sweep: LastSweep | None, breaker: Breaker, now: dt.datetime) -> list[str]:
    """The table an operator reads, then one summary line. Every cell goes through the terminal's one escape: owner
    and team are tags, so a newline in one must not forge a row, nor ESC or U+202E rewrite the screen."""
    head = ("INSTANCE", "OWNER", "TEAM", "TYPE", "STATE", "IDLE", "WARNED", "DUE", "WHY NOT IDLE")
    cells = [
        tuple(
            terminal_text(value)
            for value in (
                r.instance,
                r.owner,
                r.team,
                r.type,
                r.state,
                f"{r.idle_minutes} min" if r.idle_minutes is not None else "-",
                r.warned_at or "-",
                r.due or "-",
                r.why_not_idle or "-",
            )
        )
        for r in rows
    ]
    widths = [max(len(str(c[i])) for c in [head, *cells]) for i in range(len(head) - 1)]
    lines = [
        "  ".join(str(value).ljust(width) for value, width in zip(row, widths, strict=False)) + "  " + str(row[-1])
        for row in [head, *cells]
    ]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    tally = ", ".join(
        f"{n} {terminal_text(status)}" for status, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    when = (
        f"last sweep {_short(sweep.judged_at)} UTC ({_minutes(sweep.judged_at, now)} min ago)"
        if sweep
        else "no sweep recorded yet"
    )
    unowned = sum(1 for r in rows if r.owner == UNKNOWN)
    owners = f"; {unowned} without an owner tag" if unowned else ""
    gate = f"; circuit breaker OPEN, holding {len(breaker.held)}" if breaker.open else ""
    lines.append(f"{len(rows)} GPU instances ({tally or 'none'}){owners}; {when}{gate}")
    return lines


def as_json(rows: Sequence[FleetRow], sweep: LastSweep | None, breaker: Breaker, target: str | None) -> dict[str, Any]:
    last = (
        {"event_id": sweep.event_id, "judged_at": sweep.judged_at.isoformat(), "instances": sweep.instances}
        if sweep
        else None
    )
    return {
        "target": target,
        "last_sweep": last,
        "breaker": {"open": breaker.open, "held": sorted(breaker.held)},
        "instances": [asdict(r) for r in rows],
    }


def target_scope(target: str) -> tuple[str, str]:
    """``ACCOUNT/REGION`` of ``--target``; a UsageError naming the flag when it is not one."""
    from governor_cli.commands.ledger import ACCOUNT_ID, REGION_NAME
    from governor_cli.main import UsageError

    account, _, region = target.partition("/")
    if not ACCOUNT_ID.match(account) or not REGION_NAME.match(region):
        raise UsageError(f"--target {target!r}: expected ACCOUNT/REGION, such as 111122223333/us-east-1")
    return account, region


def scoped(ledger: Any, target: str | None) -> Any:
    """The ledger as one organisation target's sweep wrote it, or as is; an unknown target is a UsageError."""
    if target is None:
        return ledger
    from governor.fanout import TargetLedger
    from governor_cli.main import UsageError

    account, region = target_scope(target)
    view = TargetLedger(ledger, account, region)
    if view.get_item(LAST_SWEEP_KIND, BREAKER_KEY) is None and view.get_item(BREAKER_KIND, BREAKER_KEY) is None:
        raise UsageError(
            f"--target {target}: this governor's ledger holds no idle sweep of account {account} in {region} "
            "(not one of its organisation targets, or not swept yet)"
        )
    return view
