"""The governor's own findings: its warning and critical decisions, one row per policy, resource and problem, open or
resolved, each with its own reason, fix and money at stake.

What a problem is and how it is fixed is the capability's own word (the findings module its declaration names, see
``governor.domain.problems``); this module only follows each problem's history and puts the rows in the order a
person acts in.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from governor.domain import costs, facts
from governor.domain.fleet import UNKNOWN as UNKNOWN_OWNER
from governor.domain.identity import normalise_owner
from governor.domain.problems import DEFAULT_FIX, Problem
from governor.domain.times import parse_time
from governor.policy import Policy, policy_field
from governor.registry import REGISTRY
from governor.report.model import FindingRow
from governor.report.words import sentence

Flagged = list[tuple[dt.datetime, Mapping[str, Any], Problem]]
#: The problem of an instance nobody owns: its spend is charged to nobody.
UNTAGGED = "untagged"


def _report_remediation(policy_name: str) -> str:
    """Findings the report function raises itself (budgets, failed queries)."""
    if policy_name == "budgets":
        return f"Stop idle instances of the team, or raise its budget under {policy_field('budgets.teams')}."
    if policy_name == "reports":
        return "Read the query's failure reason; this report lacks that query's figures until it runs."
    return DEFAULT_FIX


def problems_of(decision: Mapping[str, Any], policy: Policy) -> list[Problem]:
    """The problems one warning or critical decision raises, in its capability's words."""
    return REGISTRY.problems_of(decision, policy, _report_remediation(str(decision.get("policy"))))


def _resolves(decision: Mapping[str, Any], key: str) -> bool:
    """A later info-level decision that says the problem is gone (the capability may say which problems it covers)."""
    if decision.get("severity", "info") != "info" or decision.get("verdict") not in ("ok", "ignored"):
        return False
    return REGISTRY.resolves(decision, key)


def _as_recorded(row: FindingRow, record: facts.ResourceFacts | None) -> FindingRow:
    """The finding with its resource's owner and team as the run's record says (``facts.ledger_facts``: the owner
    tag, else the recorded creator, else the caller), so the findings, the offenders and every message name one
    person (issue 48: "unknown" in the findings, "dara" in the offenders' table)."""
    if record is None:
        return row
    update: dict[str, Any] = {}
    if record.owner.known:
        update["owner"] = record.owner.name
    if row.team == UNKNOWN_OWNER and record.team != UNKNOWN_OWNER:
        update["team"] = record.team
    return row.model_copy(update=update) if update else row


def _owner_of(decision: Mapping[str, Any], sessions: list[Mapping[str, Any]]) -> tuple[str, str]:
    evidence = decision.get("evidence") or {}
    owner = evidence.get("owner")
    team = evidence.get("team")
    for action in decision.get("actions") or []:
        if isinstance(action, Mapping):
            owner = owner or action.get("owner")
    if sessions:
        latest = max(sessions, key=lambda s: str(s.get("start", "")))
        owner = owner or latest.get("owner")
        team = team or latest.get("team")
    return normalise_owner(owner), str(team or "unknown")


def _fixed(decision: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        a
        for a in decision.get("actions") or []
        if isinstance(a, Mapping) and a.get("type") in REGISTRY.fixing_actions() and a.get("enforced")
    ]


def findings_section(
    items: Iterable[Mapping[str, Any]],
    policy: Policy,
    start: dt.datetime,
    end: dt.datetime,
    prices: costs.PriceBook | None = None,
    records: Mapping[str, facts.ResourceFacts] | None = None,
) -> list[FindingRow]:
    """The governor's warning and critical decisions, one row per policy, resource and problem, as they stand at
    ``end``.

    A problem opens with a warning or critical decision that raises it and is resolved when that decision did a
    fixing action (a stop, a revoke...) or a later info-level decision about the same resource found it gone (busy
    again, compliant, exempted, snoozed); raised again after that, it opens again. Problems resolved before the
    period are left out; open ones are shown however old. Order: open first, critical first, then the most money at
    stake per day, then the oldest.
    """
    items = list(items)
    sessions: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for session in costs.sessions_of(items):
        sessions[str(session.get("instance_id"))].append(session)
    rows: list[FindingRow] = []
    if records is None:  # each resource's owner and team, decided once for the run (build_report passes them)
        records = facts.ledger_facts(items, prices, end)
    for (policy_name, resource), entries in _histories(items, end).items():
        own = sessions.get(resource, [])
        for history in _problem_histories(entries, policy).values():
            standing = history.standing(start)
            if standing is not None:
                row = _finding(policy_name, resource, *standing, own, prices, end)
                rows.append(_as_recorded(row, records.get(resource)))
    owners = REGISTRY.session_keeper()
    covered = {r.resource for r in rows if r.problem in owners.ownership_problems | {UNTAGGED}}
    for resource, own in sessions.items():
        record = records.get(resource)
        if resource not in covered and (record is None or not record.owner.known):
            untagged = untagged_finding(resource, own, policy, start, end, prices)
            rows += [untagged] if untagged is not None else []
    rows.sort(key=order_key)
    return rows


def untagged_finding(
    resource: str,
    sessions: list[Mapping[str, Any]],
    policy: Policy,
    start: dt.datetime,
    end: dt.datetime,
    prices: costs.PriceBook | None,
) -> FindingRow | None:
    """Untagged spend is a finding of its own (issue 37): an instance that ran in the period with no owner (no owner
    tag, ``governor:creator`` tag or recorded creator), however busy, with what it cost and what it costs a day. It is
    raised as the finding of the capability that keeps the sessions and says who owns them (``session_keeper``)."""
    inside = [s for s in sessions if costs.session_usage(s, start, end).hours > 0]
    if not inside or any(normalise_owner(s.get("owner")) != UNKNOWN_OWNER for s in inside):
        return None
    spent = sum(costs.session_usage(costs.fill_price(s, prices), start, end).cost_usd or 0.0 for s in inside)
    fleet = policy.fleet
    first = max(min(parse_time(s.get("start")) or start for s in inside), start)
    latest = max(inside, key=lambda s: str(s.get("start", "")))
    last = min(parse_time(latest.get("end")) or end, end)
    problem = Problem(UNTAGGED, "warning", "", "", costs_money=True)
    team = str(latest.get("team") or "unknown")
    keeper = REGISTRY.session_keeper().policies[0]
    return FindingRow(
        policy=keeper,
        rule=f"{keeper}.untagged",
        problem=UNTAGGED,
        severity="warning",
        resource=resource,
        summary=sentence(
            f"no owner: no {fleet.owner_tag} tag, {REGISTRY.creator_tag(policy)} tag or recorded creator; "
            f"${spent:,.2f} of GPU "
            "spend in the period is charged to nobody"
        ),
        owner=UNKNOWN_OWNER,
        team=team,
        first_seen=first,
        last_seen=last,
        status="open",
        remediation=(
            f"Tag the instance with {policy_field('fleet.owner_tag')} ({fleet.owner_tag}) and "
            f"{policy_field('fleet.team_tag')} ({fleet.team_tag}) so its cost is charged to a person and a team; "
            "ask who launched it in CloudTrail (governor audit)."
        ),
        usd_per_day=_at_stake(problem, {"resource": resource}, sessions, prices, end),
    )


def order_key(f: FindingRow) -> tuple[bool, bool, float, dt.datetime, str]:
    """Open, critical, money at stake per day (most first), oldest first."""
    return (f.status != "open", f.severity != "critical", -(f.usd_per_day or 0.0), f.first_seen, f.resource)


#: The policies of decisions about messages, not resources: the report's own runs, and the capabilities whose
#: decisions are deliveries (registry ``decides_on_resources``: the notifier's). Budgets' are about teams' spend.
ABOUT_MESSAGES = frozenset({"reports"}) | REGISTRY.policies_where(
    lambda capability: not capability.decides_on_resources
)


def _histories(items: Iterable[Mapping[str, Any]], end: dt.datetime) -> dict[tuple[str, str], list[Any]]:
    """Each (policy, resource)'s decisions made before ``end``, oldest first (decisions about messages, the notifier's
    and the report's, left out: registry ``decides_on_resources``)."""
    history: dict[tuple[str, str], list[tuple[dt.datetime, Mapping[str, Any]]]] = defaultdict(list)
    for item in items:
        if item.get("kind", "decision") != "decision" or item.get("policy") in (None, *ABOUT_MESSAGES):
            continue
        at = parse_time(item.get("at"))
        if at is None or at >= end:
            continue
        history[(str(item["policy"]), str(item.get("resource")))].append((at, item))
    for entries in history.values():
        entries.sort(key=lambda e: e[0])
    return history


@dataclass
class _History:
    """One problem of one resource: its open episode, and the last episode closed with when and how."""

    episode: Flagged = field(default_factory=list)
    closed: tuple[Flagged, dt.datetime, str] | None = None

    def close(self, at: dt.datetime, how: str) -> None:
        if self.episode:
            self.closed = (self.episode, at, how)
            self.episode = []

    def standing(self, start: dt.datetime) -> tuple[Flagged, Literal["open", "resolved"], str] | None:
        if self.episode:
            return self.episode, "open", ""
        if self.closed is not None and self.closed[1] >= start:
            return self.closed[0], "resolved", self.closed[2]
        return None


def _problem_histories(entries: list[tuple[dt.datetime, Mapping[str, Any]]], policy: Policy) -> dict[str, _History]:
    histories: dict[str, _History] = defaultdict(_History)
    for at, decision in entries:
        if decision.get("severity") in ("warning", "critical"):
            raised = problems_of(decision, policy)
            for problem in raised:
                histories[problem.key].episode.append((at, decision, problem))
            fixed = _fixed(decision)
            if fixed:
                for problem in raised:
                    histories[problem.key].close(at, f"{_done_phrase(str(fixed[0].get('type')))} by the governor")
            continue
        reason = sentence(str(next(iter(decision.get("reasons") or []), "") or "no longer flagged"))
        for key, history in histories.items():
            if history.episode and _resolves(decision, key):
                history.close(at, reason)
    return histories


def _finding(
    policy_name: str,
    resource: str,
    flagged: Flagged,
    status: Literal["open", "resolved"],
    resolution: str,
    sessions: list[Mapping[str, Any]],
    prices: costs.PriceBook | None,
    end: dt.datetime,
) -> FindingRow:
    """One row: first and last seen from the episode's decisions, the rest from its latest."""
    last_at, last, problem = flagged[-1]
    owner, team = _owner_of(last, sessions)
    return FindingRow(
        policy=policy_name,
        rule=str(last.get("rule") or policy_name),
        problem=problem.key,
        severity="critical" if any(p.severity == "critical" for _, _, p in flagged) else "warning",
        resource=resource,
        summary=sentence(problem.summary),
        owner=owner,
        team=team,
        first_seen=flagged[0][0],
        last_seen=last_at,
        status=status,
        resolution=resolution,
        remediation=problem.remediation,
        usd_per_day=_at_stake(problem, last, sessions, prices, end) if status == "open" else None,
        enforced=any(isinstance(a, Mapping) and a.get("enforced") for a in last.get("actions") or []),
    )


def _at_stake(
    problem: Problem,
    decision: Mapping[str, Any],
    sessions: list[Mapping[str, Any]],
    prices: costs.PriceBook | None,
    end: dt.datetime,
) -> float | None:
    """What the problem's resource costs a day while it stays open: an instance's one rate (``facts.price_of``) x 24
    while it runs; a reservation's empty slots at their rate (``facts.reservation_per_day``), as its "Paid for,
    unused" row (issue 48: the costliest problem had no "at stake" and ranked 16th)."""
    evidence = decision.get("evidence") or {}
    if problem.usd_per_day is not None:  # what the decision itself priced (paying twice, stopped still billing)
        return problem.usd_per_day
    if evidence.get("unused_instances") is not None:
        return facts.reservation_per_day(evidence, prices)
    if not problem.costs_money:
        return None
    latest = max(sessions, key=lambda s: str(s.get("start", "")), default=None)
    stopped = parse_time(latest.get("end")) if latest is not None else None
    if stopped is not None and stopped <= end:
        return 0.0
    kind = evidence.get("instance_type") or (latest.get("instance_type") if latest is not None else None)
    price = costs.instance_price(str(decision.get("resource")), kind, sessions, prices)
    return None if price is None else round(price * 24, 2)


def _done_phrase(action: str) -> str:
    return {
        "stop": "stopped",
        "terminate": "terminated",
        "revoke_ingress": "ingress revoked",
        "remove_public_ip": "public IP removed",
        "enable_key_rotation": "rotation enabled",
        "rotate_key": "key rotated",
        "deactivate_access_key": "access key deactivated",
        "set_secret_rotation": "secret rotation set",
        "replace": "replaced",
        "checkpoint": "checkpoint sent",
    }.get(action, action.replace("_", " ") + " done")
