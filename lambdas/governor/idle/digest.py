"""One message per owner per sweep: an owner's idle warnings of one sweep travel as one digest finding.

The sweep still publishes every warning under its own episode id (the outbox, the ledger and every other subscriber
see one finding per instance, as before); a warning whose owner has others in the same sweep is marked
``digested_in`` the digest's id, and the digest carries the warnings as its ``members``, the dearest first. The
notifier posts the digest (one actions block per member: each instance keeps its own Keep / Stop now buttons) and
only records the members. A warning alone in its sweep is posted as it always was.

A digest holds at most :data:`MAX_MEMBERS` warnings, so its Slack message stays one message within Slack's 50 blocks
(header, owner line, two blocks per instance, context, divider); an owner with more gets several digests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from governor.domain.decision import Finding
from governor.outbox import finding_id

#: The rule of an owner's digest of one sweep's idle warnings.
DIGEST_RULE = "idle.warned-digest"
WARNED_RULE = "idle.warned"
#: 4 + 2 x 20 = 44 blocks: one Slack message (limit 50), with room for the notifier's merged-note context.
MAX_MEMBERS = 20


def _money_first(warnings: Sequence[Finding]) -> list[Finding]:
    return sorted(warnings, key=lambda f: (-(f.usd_per_hour or 0.0), f.resource))


def _digest(owner_key: tuple[str | None, str | None], members: list[Finding], event_id: str) -> Finding:
    owner, team = owner_key
    lead = members[0]
    per_hour = sum(m.usd_per_hour or 0.0 for m in members)
    money = f", ${per_hour:,.2f} an hour" if per_hour else ""
    who = owner or "no known owner"
    ids = "|".join(sorted(m.id or m.resource for m in members))
    return Finding(
        policy=lead.policy,
        rule=DIGEST_RULE,
        severity=max(members, key=lambda m: {"info": 0, "warning": 1, "critical": 2}[m.severity]).severity,
        resource=", ".join(m.resource for m in members),
        title=f"{len(members)} idle GPU instances of {who}{money}",
        detail="",
        owner=owner,
        team=team,
        account=lead.account,
        region=lead.region,
        event_id=event_id,
        enforced=any(m.enforced for m in members),
        id=finding_id(f"idle-digest#{ids}", who, DIGEST_RULE),
        at=max(m.at for m in members),
        usd_per_hour=per_hour or None,
        members=members,
    )


def digest_warnings(findings: Sequence[Finding], event_id: str) -> tuple[list[Finding], dict[str, str]]:
    """The sweep's findings with each owner's warnings (two or more, per owner and team) also in a digest, and a map
    warning id -> digest id (a warning counts as published only once its digest is accepted too)."""
    groups: dict[tuple[str | None, str | None], list[Finding]] = {}
    for finding in findings:
        if finding.rule == WARNED_RULE and finding.id:
            groups.setdefault((finding.owner, finding.team), []).append(finding)
    digested: dict[str, str] = {}
    digests: list[Finding] = []
    for key, warnings in groups.items():
        if len(warnings) < 2:
            continue
        ordered = _money_first(warnings)
        for start in range(0, len(ordered), MAX_MEMBERS):
            chunk = ordered[start : start + MAX_MEMBERS]
            if len(chunk) < 2 and start:  # the 21st warning of an owner alone: posted as it is
                continue
            digest = _digest(key, chunk, event_id)
            digests.append(digest)
            digested.update({m.id: str(digest.id) for m in chunk if m.id})
    out = [f.model_copy(update={"digested_in": digested[f.id]}) if f.id in digested else f for f in findings]
    return out + digests, digested


def warning_accepted(accepted: Mapping[str, object], digested: dict[str, str]) -> Callable[[str], bool]:
    """A warning is published when the bus took it and, if it is in a digest, the digest too (what the owner sees)."""

    def check(warning_id: str) -> bool:
        return warning_id in accepted and (warning_id not in digested or digested[warning_id] in accepted)

    return check
