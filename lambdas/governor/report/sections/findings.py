"""The governor's own findings: its warning and critical decisions, one row per policy and resource, open or resolved,
each with what a person does about it."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from governor.domain import costs
from governor.domain.actions import FIXING_ACTIONS
from governor.domain.identity import normalise_owner
from governor.domain.times import parse_time
from governor.policy import Policy
from governor.registry import REGISTRY
from governor.report.model import FindingRow
from governor.report.words import sentence

#: Decisions about one resource under one policy, each with when it was made, oldest first.
Flagged = list[tuple[dt.datetime, Mapping[str, Any]]]


def remediation(policy_name: str, rule: str, policy: Policy) -> str:
    """One sentence: what a person does about a finding of this policy and rule (with the exact tag to set), as the
    registry entry of the capability that raised it says (``remediation``)."""
    capability = REGISTRY.raising(policy_name)
    found = capability.remedy(policy_name, rule, policy) if capability is not None else None
    return found or "See the decision's reasons in the ledger (governor ledger export)."


def _owner_of(decision: Mapping[str, Any], sessions: Mapping[str, list[Mapping[str, Any]]]) -> tuple[str, str]:
    evidence = decision.get("evidence") or {}
    owner = evidence.get("owner")
    team = evidence.get("team")
    for action in decision.get("actions") or []:
        if isinstance(action, Mapping):
            owner = owner or action.get("owner")
    own = sessions.get(str(decision.get("resource")), [])
    if own:
        latest = max(own, key=lambda s: str(s.get("start", "")))
        owner = owner or latest.get("owner")
        team = team or latest.get("team")
    return normalise_owner(owner), str(team or "unknown")


def _resolves(decision: Mapping[str, Any]) -> bool:
    """A later info-level decision that says the problem is gone (an idle instance still idle does not)."""
    if decision.get("severity", "info") != "info" or decision.get("verdict") not in ("ok", "ignored"):
        return False
    status = (decision.get("evidence") or {}).get("status")
    return not (decision.get("policy") == "idle" and status in costs.IDLE_STATUSES)


def _fixed(decision: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        a
        for a in decision.get("actions") or []
        if isinstance(a, Mapping) and a.get("type") in FIXING_ACTIONS and a.get("enforced")
    ]


def findings_section(
    items: Iterable[Mapping[str, Any]], policy: Policy, start: dt.datetime, end: dt.datetime
) -> list[FindingRow]:
    """The governor's warning and critical decisions, one row per policy and resource, as they stand at ``end``.

    A finding opens with a warning or critical decision and is resolved when that decision did a fixing action (a
    stop, a revoke...) or a later info-level decision about the same policy and resource found the problem gone
    (busy again, compliant, exempted, snoozed); a new warning after that opens it again. Findings resolved before
    the period are left out; open ones are shown however old. Open first, critical first, oldest first.
    """
    items = list(items)
    sessions: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for session in costs.sessions_of(items):
        sessions[str(session.get("instance_id"))].append(session)
    rows: list[FindingRow] = []
    for (policy_name, resource), entries in _histories(items, end).items():
        standing = _standing(entries, start)
        if standing is None:
            continue
        flagged, status, resolution = standing
        rows.append(_finding(policy_name, resource, flagged, status, resolution, sessions, policy))
    rows.sort(key=lambda f: (f.status != "open", f.severity != "critical", f.first_seen, f.resource))
    return rows


def _histories(items: Iterable[Mapping[str, Any]], end: dt.datetime) -> dict[tuple[str, str], Flagged]:
    """Each (policy, resource)'s decisions made before ``end``, oldest first (the notifier's and report's left out)."""
    history: dict[tuple[str, str], Flagged] = defaultdict(list)
    for item in items:
        if item.get("kind", "decision") != "decision" or item.get("policy") in (None, "notifications", "reports"):
            continue
        at = parse_time(item.get("at"))
        if at is None or at >= end:
            continue
        history[(str(item["policy"]), str(item.get("resource")))].append((at, item))
    for entries in history.values():
        entries.sort(key=lambda e: e[0])
    return history


def _standing(entries: Flagged, start: dt.datetime) -> tuple[Flagged, Literal["open", "resolved"], str] | None:
    """The finding as it stands after one resource's decisions: the open episode's warnings, or the last episode
    resolved in the period with how, or None (never flagged, or resolved before the period)."""
    episode: Flagged = []
    closed: tuple[Flagged, dt.datetime, str] | None = None
    for at, decision in entries:
        if decision.get("severity") in ("warning", "critical"):
            episode.append((at, decision))
            fixed = _fixed(decision)
            if fixed:
                closed = (episode, at, f"{_done_phrase(str(fixed[0].get('type')))} by the governor")
                episode = []
        elif episode and _resolves(decision):
            reason = next(iter(decision.get("reasons") or []), "") or "no longer flagged"
            closed = (episode, at, sentence(str(reason)))
            episode = []
    if episode:
        return episode, "open", ""
    if closed is not None and closed[1] >= start:
        return closed[0], "resolved", closed[2]
    return None


def _finding(
    policy_name: str,
    resource: str,
    flagged: Flagged,
    status: Literal["open", "resolved"],
    resolution: str,
    sessions: Mapping[str, list[Mapping[str, Any]]],
    policy: Policy,
) -> FindingRow:
    """One row: first and last seen from the episode's warnings, the rest from its latest decision."""
    last_at, last = flagged[-1]
    owner, team = _owner_of(last, sessions)
    reasons = [str(r) for r in last.get("reasons") or []]
    rule = str(last.get("rule") or policy_name)
    return FindingRow(
        policy=policy_name,
        rule=rule,
        severity="critical" if any(d.get("severity") == "critical" for _, d in flagged) else "warning",
        resource=resource,
        summary=sentence(reasons[0]) if reasons else rule,
        owner=owner,
        team=team,
        first_seen=flagged[0][0],
        last_seen=last_at,
        status=status,
        resolution=resolution,
        remediation=remediation(policy_name, rule, policy),
        enforced=any(isinstance(a, Mapping) and a.get("enforced") for a in last.get("actions") or []),
    )


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
