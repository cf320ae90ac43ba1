"""Who hears about a finding, when, and in what words: routing, merging, Slack Block Kit and email rendering.

Pure: the notifier handler reads merge state from the ledger and passes it in, then sends what this module renders
through the Slack and SES adapters. Slack's limits (50 blocks a message, 3,000 characters a section text) are
enforced here, so no adapter ever posts a payload Slack would reject.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from governor.core_policy import NotificationsPolicy
from governor.domain.actions import AnyAction, Notify
from governor.domain.decision import Decision, Finding, Severity, Verdict
from governor.domain.escape import email_header, html_text, slack_text
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
from governor.registry import REGISTRY

MERGE_KIND = "notify-merge"
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}
_ICON = {"info": ":information_source:", "warning": ":warning:", "critical": ":rotating_light:"}
_COLOUR = {"info": "#2563eb", "warning": "#d97706", "critical": "#dc2626"}

Channel = Literal["slack", "email"]
#: A Slack target posted with the bot token to a channel id (``notifications.slack_channel``), not a webhook secret.
BOT_CHANNEL = "channel:"


# --- routing -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """Where one finding goes: Slack webhooks (by secret name) and email addresses."""

    slack_secrets: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()
    reason: str = ""
    owner_email: str | None = None
    #: Held for the team's daily digest (``notifications.immediate``) rather than posted now.
    digest: bool = False

    @property
    def empty(self) -> bool:
        return not self.slack_secrets and not self.emails and not self.owner_email


def route(finding: Finding, policy: NotificationsPolicy) -> Route:
    """Severity gate first, then the finding's team route (else the default channel); recipients come only from there.

    The owner (a tag any account user can set) is emailed on a message of its own, and only when the tag is one
    well-formed address in ``notifications.owner_email_domains``: a tag never adds a recipient to a team's message.
    """
    if SEVERITY_RANK[finding.severity] < SEVERITY_RANK[policy.min_severity]:
        return Route(reason=f"severity {finding.severity} is below notifications.min_severity {policy.min_severity}")
    if not posts_now(finding, policy):
        what = (
            "report-only idle outcome (nothing was done; the owner was warned once for this idle episode)"
            if finding.policy in TIME_BOUND_POLICIES
            else f"{finding.policy} finding"
        )
        return Route(
            reason=f"a {finding.severity} {what} waits for the daily report digest "
            f"(notifications.immediate: {policy.immediate})",
            digest=True,
        )
    team = policy.teams.get(finding.team or "")
    slack = (team.slack_secret_name if team and team.slack_secret_name else None) or policy.slack_secret_name
    channel = bot_channel(finding, policy)
    if channel:  # the bot token posts there (chat.postMessage), so the message can be updated in place later
        slack = f"{BOT_CHANNEL}{channel}"
    emails: list[str] = list(team.email) if team and team.email else list(policy.email_recipients)
    owner = owner_address(finding.owner, policy)
    if not policy.email_sender:
        emails = []
        owner = None
    why = f"team {finding.team}" if team else "default route"
    return Route(slack_secrets=(slack,), emails=tuple(emails), reason=why, owner_email=owner)


def bot_channel(finding: Finding, policy: NotificationsPolicy) -> str | None:
    """The channel id the bot token posts the finding's team's messages to (``slack_channel``), None with a webhook."""
    team = policy.teams.get(finding.team or "")
    return (team.slack_channel if team and team.slack_channel else None) or policy.slack_channel


#: Findings whose point is lost if they wait for the daily digest: an idle stop is due at the end of the warning
#: period, a Spot interruption comes within two minutes, a clicked button's answer is awaited now.
#: Each capability's registry entry says whether its findings are (``time_bound``).
TIME_BOUND_POLICIES = REGISTRY.policies_where(lambda capability: capability.time_bound)


#: Idle outcomes nothing comes of now: "would be stopped now (report-only: not done)" and "reported, not reclaimed".
#: The owner was warned once for the episode; these are the report's business (its idle findings and the team
#: digest), not a post per instance per sweep.
REPORT_ONLY_OUTCOMES = frozenset({"idle.acted", "idle.reported"})

#: Rules that withdraw an episode's warning (registry ``episode_withdrawals``): the resource is no longer judged idle,
#: so nothing will be done and there is nothing to act on. They never post a message of their own (see
#: :func:`decide_notification`).
WITHDRAWALS = frozenset(rule for capability in REGISTRY.values() for rule in capability.episode_withdrawals)


def time_bound(finding: Finding) -> bool:
    """A finding whose point is lost if it waits a day: a time-bound policy's, unless it says only what would have
    been done (a report-only idle stop, an instance reported and not reclaimed)."""
    if finding.policy not in TIME_BOUND_POLICIES or finding.rule in WITHDRAWALS:
        return False
    return not (finding.rule in REPORT_ONLY_OUTCOMES and (finding.rule == "idle.reported" or not finding.enforced))


def posts_now(finding: Finding, policy: NotificationsPolicy) -> bool:
    """``immediate: all`` posts everything at once; ``critical`` only criticals; ``actionable`` (the default) criticals
    and the time-bound findings (:func:`time_bound`). Everything else is in the team's daily report digest."""
    if policy.immediate == "all" or finding.severity == "critical":
        return True
    return policy.immediate == "actionable" and time_bound(finding)


_EMAIL = re.compile(r"[A-Za-z0-9._%+-]{1,64}@((?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,63})")


def owner_address(value: str | None, policy: NotificationsPolicy) -> str | None:
    """The owner tag as an email address when it is exactly one address in an allowed domain, else None.

    ``a@corp.example,b@attacker.example``, display names and addresses in other domains are never used.
    """
    if not value or not policy.owner_email_domains:
        return None
    match = _EMAIL.fullmatch(value.strip())
    if not match:
        return None
    domain = match.group(1).lower()
    return value.strip() if domain in policy.owner_email_domains else None


# --- merging -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergedFinding:
    """A finding to send, with how many earlier findings about the same resource and rule it stands for."""

    finding: Finding
    merged: int = 0
    since: dt.datetime | None = None
    buttons: Block | None = None  # a Block Kit actions block whose buttons carry only an opaque token
    #: An owner's digest: each member's own actions block (or None), in the members' order.
    member_buttons: tuple[Block | None, ...] = ()


@dataclass(frozen=True)
class MergeStep:
    """The outcome of merging one finding into the state kept in the ledger for its resource and rule."""

    send: bool
    item: MergedFinding
    state: dict[str, Any]
    reason: str


def merge_key(finding: Finding) -> str:
    """Findings about one resource and rule merge; an owner's digest never does (each sweep's warnings are new)."""
    if finding.members:
        return f"{finding.rule}#{finding.id}"
    return f"{finding.rule}#{finding.resource}"


def merge(finding: Finding, state: dict[str, Any] | None, window_minutes: int, now: dt.datetime) -> MergeStep:
    """Send the first finding of a window; fold later ones in; a severity escalation always goes out at once.

    Findings folded into an open window are counted, and the next message after the window closes says how many
    it stands for, so nothing is dropped silently.
    """
    window = dt.timedelta(minutes=window_minutes)
    opened = parse_time(state.get("window_start")) if state else None
    folded = int(state.get("merged", 0)) if state else 0
    sent_rank = SEVERITY_RANK.get(str(state.get("severity")), 0) if state else 0
    within = opened is not None and window > dt.timedelta(0) and now - opened < window
    escalated = SEVERITY_RANK[finding.severity] > sent_rank
    if within and not escalated and state is not None:
        new_state = {**state, "merged": folded + 1, "last_at": now.isoformat()}
        reason = f"merged into the message sent at {opened.isoformat() if opened else '?'} (same resource and rule)"
        return MergeStep(False, MergedFinding(finding, folded + 1, opened), new_state, reason)
    new_state = {
        "window_start": now.isoformat(),
        "merged": 0,
        "severity": finding.severity,
        "resource": finding.resource,
        "rule": finding.rule,
        "last_at": now.isoformat(),
    }
    reason = "escalated severity" if within and escalated else "first finding in its merge window"
    return MergeStep(True, MergedFinding(finding, folded, opened if folded else None), new_state, reason)


def merge_batch(findings: Iterable[Finding]) -> list[MergedFinding]:
    """Findings delivered together about the same resource and rule become one message (the most severe wins)."""
    groups: dict[str, list[Finding]] = {}
    for finding in findings:
        groups.setdefault(merge_key(finding), []).append(finding)
    merged = []
    for group in groups.values():
        lead = max(group, key=lambda f: (SEVERITY_RANK[f.severity], f.at))
        merged.append(MergedFinding(lead, len(group) - 1, min(f.at for f in group) if len(group) > 1 else None))
    return merged


# --- delivery plan -------------------------------------------------------------------------------------------------


@dataclass
class Delivery:
    """One message (or message series) to one target: a Slack webhook secret or a set of email recipients."""

    channel: Channel
    target: tuple[str, ...]
    items: list[MergedFinding] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.channel}:{','.join(self.target)}"


def plan_deliveries(items: Sequence[MergedFinding], policy: NotificationsPolicy) -> list[Delivery]:
    """Group the findings to send by destination, so each destination gets one message series."""
    deliveries: dict[tuple[Channel, tuple[str, ...]], Delivery] = {}
    for item in items:
        where = route(item.finding, policy)
        for secret in where.slack_secrets:
            key: tuple[Channel, tuple[str, ...]] = ("slack", (secret,))
            deliveries.setdefault(key, Delivery("slack", (secret,))).items.append(item)
        if where.emails:
            key = ("email", tuple(sorted(where.emails)))
            deliveries.setdefault(key, Delivery("email", key[1])).items.append(item)
        if where.owner_email and where.owner_email not in where.emails:
            key = ("email", (where.owner_email,))
            deliveries.setdefault(key, Delivery("email", key[1])).items.append(item)
    return list(deliveries.values())


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
        due = parse_time(action.get("due"))
        when = f" at {due:%Y-%m-%d %H:%M} UTC" if due else ""
        owner = action.get("owner")
        who = f"{owner}: " if owner and owner != "unknown" else ""
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
    who = str(action.get("owner") or "")
    user = (people or {}).get(who.strip().lower()) if action.get("type") == "warn" else None
    if user and sentence.startswith(f"{who}: "):
        return f"• <@{user}>: {slack_text(sentence[len(who) + 2 :])}"
    return f"• {slack_text(sentence)}"


def slack_people(slack_users: Mapping[str, str]) -> dict[str, str]:
    """Email (lower case) -> Slack user id, from the policy's ``interactions.slack_users`` (id -> email)."""
    return {email.lower(): user for user, email in slack_users.items()}


def owner_text(owner: str | None, people: Mapping[str, str]) -> str:
    """The owner as Slack shows it: a mention (``<@U…>``, which notifies them) when their Slack identity is known,
    else the name escaped; an unknown owner is said to be unknown, never left blank."""
    if not owner or owner == UNKNOWN_OWNER:
        return "unknown (no owner tag or recorded creator)"
    user = people.get(owner.strip().lower())
    return f"<@{user}> ({slack_text(owner)})" if user else slack_text(owner)


#: An ISO 8601 UTC time as decisions record it (``2026-11-20T09:00:00+00:00``); messages show one format instead.
_ISO_UTC = re.compile(r"\b(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(?::\d{2}(?:\.\d+)?)?(?:\+00:00|Z)(?![\w:])")


def plain_times(text: str) -> str:
    """Every UTC ISO 8601 time in ``text`` as ``YYYY-MM-DD HH:MM UTC``, the one format messages use."""
    return _ISO_UTC.sub(r"\1 \2 UTC", text)


def finding_blocks(item: MergedFinding, people: Mapping[str, str] | None = None, titled: bool = True) -> list[Block]:
    """The blocks of one finding: what, about which resource, who owns it (pinged when their Slack id is known),
    what the governor did or would do. ``titled=False`` when the message's header already is the title.

    No rule ids or event ids (the ledger keeps them; ``governor explain`` shows them) and one time format."""
    f = item.finding
    people = people or {}
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
    blocks = section("\n".join(lines))
    lines = [line for line in (_action_line(a, f.owner, people) for a in f.actions) if line]
    if lines:
        blocks += section("\n".join(lines))
    if item.buttons is not None:
        blocks.append(item.buttons)
    for member, buttons in zip(f.members, item.member_buttons or [None] * len(f.members), strict=True):
        blocks += member_blocks(member, buttons)
    where = " · ".join(
        part
        for part in (
            f"{f.account or ''} {f.region or ''}".strip(),
            f.at.strftime("%Y-%m-%d %H:%M UTC"),
            _merged_note(item),
        )
        if part
    )
    blocks.append(context(slack_text(where)))
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
    """The owner as an email names them: the owner tag (their address or name), or why nobody is named."""
    if not owner or owner == UNKNOWN_OWNER:
        return "unknown (no owner tag or recorded creator)"
    return owner


def addressee(items: Sequence[MergedFinding], recipients: Sequence[str]) -> str | None:
    """The owner an email is addressed to: its one recipient, when that is the owner of every finding in it (the
    notifier emails an owner only at an address in ``notifications.owner_email_domains``, see :func:`route`)."""
    if len(recipients) != 1 or not items:
        return None
    to = recipients[0].strip().lower()
    return recipients[0] if all((i.finding.owner or "").strip().lower() == to for i in items) else None


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
        f = item.finding
        actions = [
            sentence
            for sentence in (
                action_sentence(
                    {**a, "owner": f.owner}
                    if a.get("type") == "warn" and a.get("owner") in (None, UNKNOWN_OWNER)
                    else a
                )
                for a in f.actions
            )
            if sentence
        ]
        facts = [
            ("Severity", f.severity),
            ("Resource", f.resource),
            ("Owner", owner_named(f.owner)),
            ("Team", f.team or "unknown"),
            ("When", f.at.strftime("%Y-%m-%d %H:%M UTC")),
        ]
        if f.account or f.region:
            facts.append(("Where", f"{f.account or ''} {f.region or ''}".strip()))
        if actions:
            facts.append(("Actions", "; ".join(actions)))
        for member in f.members:
            member_actions = [s for s in (action_sentence({**a, "owner": None}) for a in member.actions) if s]
            facts.append((member.resource, "; ".join([_money(member), *member_actions])))
        note = _merged_note(item)
        text_parts.append(
            "\n".join(
                [f"[{f.severity.upper()}] {f.title}", *(f"  {k}: {v}" for k, v in facts)]
                + ([f"  {plain_times(f.detail)}"] if f.detail else [])
                + ([f"  ({note})"] if note else [])
            )
        )
        rows = "".join(
            f"<tr><th style='text-align:left;padding:2px 12px 2px 0'>{html_text(k)}</th>"
            f"<td>{html_text(str(v))}</td></tr>"
            for k, v in facts
        )
        html_parts.append(
            f"<div style='border-left:4px solid {_COLOUR[f.severity]};padding:4px 12px;margin:12px 0'>"
            f"<h3 style='margin:4px 0'>{html_text(f.title)}</h3><table>{rows}</table>"
            + (f"<p>{html_text(plain_times(f.detail))}</p>" if f.detail else "")
            + (f"<p><em>{html_text(note)}</em></p>" if note else "")
            + "</div>"
        )
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


def severity_at_least(severity: Severity, floor: Severity) -> bool:
    return SEVERITY_RANK[severity] >= SEVERITY_RANK[floor]


# --- the decision: route, merge, deliver ---------------------------------------------------------------------------


def notification_decision(
    finding: Finding, verdict: Verdict, reasons: list[str], actions: Sequence[AnyAction], rule: str
) -> Decision:
    """The ledger's record of what became of one finding (the notifier's decisions all have this shape)."""
    return Decision(
        policy="notifications",
        verdict=verdict,
        resource=finding.resource,
        actions=list(actions),
        reasons=reasons,
        evidence={"finding_rule": finding.rule, "severity": finding.severity, "title": finding.title},
        severity=finding.severity,
        rule=rule,
    )


@dataclass(frozen=True)
class NotificationPlan:
    """The decision about one finding, and the merge step behind it (None when it is not routed now)."""

    decision: Decision
    step: MergeStep | None = None
    #: A withdrawn warning's episode message (``channel``, ``ts``, ``digest``), to update in place (or reply under).
    withdraw: Mapping[str, Any] | None = None

    @property
    def digest(self) -> bool:
        return self.decision.rule == "notifications.digest"


def decide_notification(
    finding: Finding,
    policy: NotificationsPolicy,
    merge_state: Callable[[], Mapping[str, Any] | None],
    now: dt.datetime,
    episode_message: Callable[[], Mapping[str, Any] | None] | None = None,
) -> NotificationPlan:
    """Held for the digest, not routed, merged into a recent message, or delivered to each routed destination.

    ``merge_state`` reads the state kept for the finding's resource and rule; it is called only for a routed finding.
    ``episode_message`` reads the Slack message kept for the resource's episode; called only for a withdrawal.
    """
    if finding.digested_in:
        why = f"posted inside its owner's digest of this sweep's idle warnings ({finding.digested_in})"
        return NotificationPlan(notification_decision(finding, "ok", [why], [], "notifications.in-owner-digest"))
    if finding.rule in WITHDRAWALS:
        return _withdrawal(finding, policy, episode_message)
    where = route(finding, policy)
    if where.digest:
        return NotificationPlan(notification_decision(finding, "ok", [where.reason], [], "notifications.digest"))
    if where.empty:
        return NotificationPlan(notification_decision(finding, "ignored", [where.reason], [], "notifications.route"))
    state = merge_state()
    step = merge(finding, dict(state) if state is not None else None, policy.merge_window_minutes, now)
    if not step.send:
        return NotificationPlan(notification_decision(finding, "ok", [step.reason], [], "notifications.merged"), step)
    actions = [
        Notify(enforced=policy.enforce, channel=d.channel, target=list(d.target))
        for d in plan_deliveries([step.item], policy)
    ]
    reasons = [f"routed by {where.reason}", step.reason]
    return NotificationPlan(notification_decision(finding, "act", reasons, actions, "notifications.deliver"), step)


def _withdrawal(
    finding: Finding, policy: NotificationsPolicy, episode_message: Callable[[], Mapping[str, Any] | None] | None
) -> NotificationPlan:
    """A withdrawn warning is never a message of its own, whatever ``immediate`` and ``min_severity`` say: nothing
    will be done, so a post would only add noise to the channel. What it corrects is the warning still in the
    channel with live buttons: with the bot token and the episode's message kept, that message is updated in place
    (an owner's digest gets a reply in its thread, see the handler). Otherwise (a webhook gives no ``ts``; a message
    posted before ``slack_channel`` was set or older than its record) it waits for the daily report digest."""
    channel = bot_channel(finding, policy)
    held = episode_message() if channel and episode_message is not None else None
    if channel and held and held.get("channel") == channel and held.get("ts") and not held.get("withdrawn_at"):
        how = "a reply in its owner's digest thread" if held.get("digest") else "updated in place, its buttons removed"
        reasons = [f"withdraws the warning posted at {held.get('posted_at') or '?'}: the episode's message is {how}"]
        actions = [Notify(enforced=policy.enforce, channel="slack", target=[f"{BOT_CHANNEL}{channel}"])]
        decision = notification_decision(finding, "act", reasons, actions, "notifications.withdraw")
        return NotificationPlan(decision, withdraw=dict(held))
    where = (
        "no message of this episode is kept for that channel"
        if channel
        else "a webhook's message cannot be edited (no ts; notifications.slack_channel lets the bot update it)"
    )
    why = f"a withdrawn warning never posts a message of its own; {where}: it waits for the daily report digest"
    return NotificationPlan(notification_decision(finding, "ok", [why], [], "notifications.digest"))
