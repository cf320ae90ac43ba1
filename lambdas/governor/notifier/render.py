"""A notification in words: Slack Block Kit messages and email, from what the notifier decided to deliver.

Pure. Slack's limits (50 blocks a message, 3,000 characters a section text) are enforced here, so no adapter ever
posts a payload Slack would reject. No rule ids or event ids (the ledger keeps them) and one time format.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from governor.domain.decision import Finding
from governor.domain.escape import email_header, html_text, slack_text
from governor.domain.facts import action_path, owner_of
from governor.domain.fleet import UNKNOWN as UNKNOWN_OWNER
from governor.domain.messages import (
    Block,
    Email,
    Message,
    context,
    header,
    pack_messages,
    section,
)
from governor.domain.times import parse_time
from governor.notifier.domain import SEVERITY_RANK, MergedFinding

_ICON = {"info": ":information_source:", "warning": ":warning:", "critical": ":rotating_light:"}
_COLOUR = {"info": "#2563eb", "warning": "#d97706", "critical": "#dc2626"}


# --- Slack Block Kit (helpers and limits: governor.domain.messages) -----------------------------------------


# Bookkeeping a person needs not read about in a notification (the ledger keeps them).
QUIET_ACTIONS = frozenset({"notify", "record", "tag", "untag"})
REPORT_ONLY = " (report-only: not done)"
_DONE = {
    "stop": ("Stopped the instance", "Would stop the instance"),
    "terminate": ("Terminated the instance", "Would terminate the instance"),
    "checkpoint": ("Sent the checkpoint command", "Would send the checkpoint command"),
    "replace": ("Requested a replacement instance", "Would request a replacement instance"),
    "remove_public_ip": ("Removed the public IP address", "Would remove the public IP address"),
    "enable_key_rotation": ("Turned on automatic key rotation", "Would turn on automatic key rotation"),
    "rotate_key": ("Rotated the key", "Would rotate the key"),
    "deactivate_access_key": ("Deactivated the access key", "Would deactivate the access key"),
    "set_secret_rotation": ("Set the secret's rotation schedule", "Would set the secret's rotation schedule"),
}


def action_sentence(action: dict[str, Any]) -> str | None:
    """One plain sentence for an action, or None for bookkeeping; report-only ones say "would" and "not done".

    A warning says exactly how to keep the instance (the snooze and exempt tags the policy reads).
    """
    kind = str(action.get("type", ""))
    done = bool(action.get("enforced"))
    if kind in QUIET_ACTIONS:
        return None
    if kind == "warn":
        planned = {"stop": "stopped", "terminate": "terminated"}.get(str(action.get("planned")), "reclaimed")
        if action.get("via") and action.get("planned") in ("stop", "terminate"):  # the path that would really run
            planned = action_path(action).done()
        due = parse_time(action.get("due"))
        when = f" at {due:%Y-%m-%d %H:%M} UTC" if due else ""
        owner = owner_of(action.get("owner"))
        who = f"{owner.name}: " if owner.known else ""  # the one name every surface gives the owner
        keep = (
            f" To keep it, tag it {action.get('snooze_tag', 'governor:keep-until')}=<ISO 8601 time> (snooze until "
            f"then) or {action.get('exempt_tag', 'governor:exempt')}=true (exempt)."
        )
        if done:
            return f"{who}it will be {planned}{when} unless it is used.{keep}"
        return f"{who}it would be {planned}{when} if idle enforcement were on (report-only: nothing will happen).{keep}"
    if kind == "revoke_ingress":
        rule = " ".join(str(action[k]) for k in ("protocol", "ports") if action.get(k) not in (None, "", [])).strip()
        source = action.get("source")
        what = f"the ingress rule {rule} from {source}" if rule and source else "the world-open ingress rule"
        group = f" on {action['group_id']}" if action.get("group_id") else ""
        return f"Revoked {what}{group}" if done else f"Would revoke {what}{group}{REPORT_ONLY}"
    if kind in _DONE:
        yes, would = _DONE[kind]
        return yes if done else would + REPORT_ONLY
    words = kind.replace("_", " ")
    return f"Did: {words}" if done else f"Would do: {words}{REPORT_ONLY}"


def _action_line(
    action: dict[str, Any], owner: str | None = None, people: Mapping[str, str] | None = None
) -> str | None:
    """One action as a bullet; a warning addressed to a known owner starts with their mention."""
    if action.get("type") == "warn" and (not action.get("owner") or action.get("owner") == UNKNOWN_OWNER) and owner:
        action = {**action, "owner": owner}  # the owner the finding resolved (a recorded creator), not "unknown"
    sentence = action_sentence(action)
    if not sentence:
        return None
    who = owner_of(action.get("owner"), people=people)
    user = who.slack_user if action.get("type") == "warn" else None
    if user and sentence.startswith(f"{who.name}: "):
        return f"• <@{user}>: {slack_text(sentence[len(who.name) + 2 :])}"
    return f"• {slack_text(sentence)}"


def slack_people(slack_users: Mapping[str, str]) -> dict[str, str]:
    """Email (lower case) -> Slack user id, from the policy's ``interactions.slack_users`` (id -> email)."""
    return {email.lower(): user for user, email in slack_users.items()}


def owner_text(owner: str | None, people: Mapping[str, str]) -> str:
    """The owner as Slack shows it: the one name every surface gives them (``facts.owner_of``: a role ARN or an
    address is the person's name), with a mention (``<@U…>``, which notifies them) when their Slack identity is known
    by address or name; an unknown owner is said to be unknown, never left blank."""
    found = owner_of(owner, people=people)
    if not found.known:
        return found.text()
    return f"<@{found.slack_user}> ({slack_text(found.name)})" if found.slack_user else slack_text(found.name)


#: An ISO 8601 UTC time as decisions record it (``2026-11-20T09:00:00+00:00``); messages show one format instead.
_ISO_UTC = re.compile(r"\b(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(?::\d{2}(?:\.\d+)?)?(?:\+00:00|Z)(?![\w:])")


def plain_times(text: str) -> str:
    """Every UTC ISO 8601 time in ``text`` as ``YYYY-MM-DD HH:MM UTC``, the one format messages use."""
    return _ISO_UTC.sub(r"\1 \2 UTC", text)


def _headline(f: Finding, people: Mapping[str, str], titled: bool) -> list[str]:
    """What and about which resource, who owns it, and the finding's own words (its digest says once how to keep)."""
    lines = [f"{_ICON[f.severity]} *{slack_text(f.title)}*" if titled else f"{_ICON[f.severity]} *{f.severity}*"]
    facts = [] if f.members else [f"*Resource* `{slack_text(f.resource)}`"]
    if f.owner or f.team or f.members:
        facts.append(f"*Owner* {owner_text(f.owner, people)}")
        facts.append(f"*Team* {slack_text(f.team or 'unknown')}")
    lines.append("   ".join(facts))
    if f.detail:
        lines.append(slack_text(plain_times(f.detail)))
    if f.members and (keep := keep_line(f)):
        lines.append(slack_text(keep))
    return lines


def _where(item: MergedFinding) -> str:
    """The context line: account and region, when, and what was merged into the message."""
    f = item.finding
    parts = (f"{f.account or ''} {f.region or ''}".strip(), f.at.strftime("%Y-%m-%d %H:%M UTC"), _merged_note(item))
    return " · ".join(part for part in parts if part)


def finding_blocks(item: MergedFinding, people: Mapping[str, str] | None = None, titled: bool = True) -> list[Block]:
    """The blocks of one finding: what, about which resource, who owns it (pinged when their Slack id is known),
    what the governor did or would do. ``titled=False`` when the message's header already is the title.

    No rule ids or event ids (the ledger keeps them; ``governor explain`` shows them) and one time format."""
    f = item.finding
    people = people or {}
    blocks = section("\n".join(_headline(f, people, titled)))
    lines = [line for line in (_action_line(a, f.owner, people) for a in f.actions) if line]
    if lines:
        blocks += section("\n".join(lines))
    if item.buttons is not None:
        blocks.append(item.buttons)
    for member, buttons in zip(f.members, item.member_buttons or [None] * len(f.members), strict=True):
        blocks += member_blocks(member, buttons)
    blocks.append(context(slack_text(_where(item))))
    blocks.append({"type": "divider"})
    return blocks


def _money(finding: Finding) -> str:
    return f"${finding.usd_per_hour:,.2f}/h" if finding.usd_per_hour else "price unknown"


#: Slack refuses a message whose blocks hold more than ~13,000 characters in all (``msg_blocks_too_long``), below
#: the 50 blocks x 3,000; a digest of 20 instances keeps each instance's reasons short and says how to keep once.
MEMBER_DETAIL_CHARS = 300
_KEEP = " To keep it, tag it "


def _sentences(finding: Finding) -> list[str | None]:
    return [action_sentence({**a, "owner": None}) for a in finding.actions]


def keep_line(finding: Finding) -> str | None:
    """How to keep an instance, said once for an owner's digest (each warning's sentence ends with it)."""
    for member in finding.members:
        for sentence in _sentences(member):
            if sentence and _KEEP in sentence:
                return "To keep one, tag it " + sentence.split(_KEEP, 1)[1]
    return None


def member_blocks(member: Finding, buttons: Block | None) -> list[Block]:
    """One instance of an owner's digest: what it is, what it costs, what will (or would) happen; its own buttons."""
    lines = [f"*`{slack_text(member.resource)}`*  {_money(member)}"]
    if member.detail:
        detail = plain_times(member.detail)
        lines.append(
            slack_text(detail if len(detail) <= MEMBER_DETAIL_CHARS else detail[: MEMBER_DETAIL_CHARS - 1] + "…")
        )
    lines += [f"• {slack_text(sentence.split(_KEEP)[0])}" for sentence in _sentences(member) if sentence]
    blocks = section("\n".join(lines))[:1]  # one section per instance, so the digest stays one message
    return blocks + ([buttons] if buttons is not None else [])


def _merged_note(item: MergedFinding) -> str:
    if not item.merged:
        return ""
    since = f" since {item.since.strftime('%Y-%m-%d %H:%M UTC')}" if item.since else ""
    plural = "s" if item.merged != 1 else ""
    return f"{item.merged} more finding{plural} about this resource and rule{since} merged into this message"


def summary_line(items: Sequence[MergedFinding]) -> str:
    counts = {s: sum(1 for i in items if i.finding.severity == s) for s in ("critical", "warning", "info")}
    parts = [f"{n} {s}" for s, n in counts.items() if n]
    first = items[0].finding.title if items else "no findings"
    return f"GPU Fleet Governor: {first}" if len(items) == 1 else f"GPU Fleet Governor: {', '.join(parts)} findings"


def slack_messages(items: Sequence[MergedFinding], people: Mapping[str, str] | None = None) -> list[Message]:
    """Block Kit messages for a set of findings, split so every message is within Slack's limits. ``people``
    (:func:`slack_people`) turns known owners into mentions."""
    ordered = sorted(items, key=lambda i: (-SEVERITY_RANK[i.finding.severity], i.finding.at))
    summary = slack_text(summary_line(ordered))  # the fallback ``text`` drives notifications: <!channel> too
    single = len(ordered) == 1
    title = header(slack_text(ordered[0].finding.title) if single else summary)  # said once, in the header
    return pack_messages([finding_blocks(item, people, titled=not single) for item in ordered], summary, title)


# --- email ---------------------------------------------------------------------------------------------------------


def owner_named(owner: str | None) -> str:
    """The owner as an email names them: the one name every surface gives them (``facts.owner_of``), or why nobody
    is named."""
    return owner_of(owner).text()


def addressee(items: Sequence[MergedFinding], recipients: Sequence[str]) -> str | None:
    """The owner an email is addressed to: its one recipient, when that is the owner of every finding in it (the
    notifier emails an owner only at an address in ``notifications.owner_email_domains``, see :func:`route`)."""
    if len(recipients) != 1 or not items:
        return None
    to = recipients[0].strip().lower()
    return recipients[0] if all((i.finding.owner or "").strip().lower() == to for i in items) else None


def _email_actions(f: Finding) -> list[str]:
    """The finding's actions as sentences; a warning without an owner of its own names the finding's."""
    sentences = (
        action_sentence(
            {**a, "owner": f.owner} if a.get("type") == "warn" and a.get("owner") in (None, UNKNOWN_OWNER) else a
        )
        for a in f.actions
    )
    return [sentence for sentence in sentences if sentence]


def _email_facts(f: Finding) -> list[tuple[str, str]]:
    """The rows of one finding's table: severity, resource, owner, team, when, where, actions, each digest member."""
    facts = [
        ("Severity", f.severity),
        ("Resource", f.resource),
        ("Owner", owner_named(f.owner)),
        ("Team", f.team or "unknown"),
        ("When", f.at.strftime("%Y-%m-%d %H:%M UTC")),
    ]
    if f.account or f.region:
        facts.append(("Where", f"{f.account or ''} {f.region or ''}".strip()))
    actions = _email_actions(f)
    if actions:
        facts.append(("Actions", "; ".join(actions)))
    for member in f.members:
        member_actions = [s for s in (action_sentence({**a, "owner": None}) for a in member.actions) if s]
        facts.append((member.resource, "; ".join([_money(member), *member_actions])))
    return facts


def _email_text(f: Finding, facts: list[tuple[str, str]], note: str) -> str:
    return "\n".join(
        [f"[{f.severity.upper()}] {f.title}", *(f"  {k}: {v}" for k, v in facts)]
        + ([f"  {plain_times(f.detail)}"] if f.detail else [])
        + ([f"  ({note})"] if note else [])
    )


def _email_html(f: Finding, facts: list[tuple[str, str]], note: str) -> str:
    rows = "".join(
        f"<tr><th style='text-align:left;padding:2px 12px 2px 0'>{html_text(k)}</th><td>{html_text(str(v))}</td></tr>"
        for k, v in facts
    )
    return (
        f"<div style='border-left:4px solid {_COLOUR[f.severity]};padding:4px 12px;margin:12px 0'>"
        f"<h3 style='margin:4px 0'>{html_text(f.title)}</h3><table>{rows}</table>"
        + (f"<p>{html_text(plain_times(f.detail))}</p>" if f.detail else "")
        + (f"<p><em>{html_text(note)}</em></p>" if note else "")
        + "</div>"
    )


def email_for(items: Sequence[MergedFinding], recipients: Sequence[str] = ()) -> Email:
    """One email for a set of findings: HTML for mail clients, the same content as plain text for the rest.

    Each finding names its owner (as Slack mentions them); an email sent to the owner themselves (``recipients`` is
    their address alone) says so at the top and in its subject, so they know it is about their instances."""
    ordered = sorted(items, key=lambda i: (-SEVERITY_RANK[i.finding.severity], i.finding.at))
    owner = addressee(ordered, recipients)
    subject = email_header(summary_line(ordered) + (" (yours)" if owner else ""))
    greeting = (
        f"To {owner}: you are the owner of the resource{'s' if _resources(ordered) > 1 else ''} below "
        "(its owner tag or recorded creator)."
        if owner
        else ""
    )
    text_parts: list[str] = []
    html_parts: list[str] = []
    for item in ordered:
        facts, note = _email_facts(item.finding), _merged_note(item)
        text_parts.append(_email_text(item.finding, facts, note))
        html_parts.append(_email_html(item.finding, facts, note))
    opening = f"{greeting}\n\n" if greeting else ""
    text = subject + "\n\n" + opening + "\n\n".join(text_parts) + "\n"
    body = (
        "<!doctype html><html><body style='font-family:sans-serif'>"
        f"<h2>{html_text(subject)}</h2>"
        + (f"<p>{html_text(greeting)}</p>" if greeting else "")
        + f"{''.join(html_parts)}</body></html>"
    )
    return Email(subject=subject, html=body, text=text)


def _resources(items: Sequence[MergedFinding]) -> int:
    return sum(max(1, len(i.finding.members)) for i in items)
