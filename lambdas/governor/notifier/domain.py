"""Who hears about a finding, and when: routing, merging, the delivery plan and the notifier's decision.

Pure: the notifier handler reads merge state from the ledger and passes it in, then sends what ``render`` makes of
the plan through the Slack and SES adapters.
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
from governor.domain.messages import Block
from governor.domain.times import parse_time
from governor.registry import REGISTRY

MERGE_KIND = "notify-merge"
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}

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
    #: Held for the channel's digest (``notifications.immediate``, ``digest_hours``) rather than posted now.
    digest: bool = False
    #: The Slack target whose digest holds it (a webhook secret, or ``channel:<id>``), when ``digest``.
    held_for: str | None = None

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
    slack = slack_target(finding, policy)
    if not posts_now(finding, policy):
        what = (
            "report-only idle outcome (nothing was done; the owner was warned once for this idle episode)"
            if finding.policy in TIME_BOUND_POLICIES and not due(finding)
            else f"{finding.policy} finding"
        )
        return Route(
            reason=f"a {finding.severity} {what} waits for the channel's digest, posted every "
            f"{policy.digest_hours} h (notifications.immediate: {policy.immediate})",
            digest=True,
            held_for=slack,
        )
    team = policy.teams.get(finding.team or "")
    emails: list[str] = list(team.email) if team and team.email else list(policy.email_recipients)
    owner = owner_address(finding.owner, policy)
    if not policy.email_sender:
        emails = []
        owner = None
    why = f"team {finding.team}" if team else "default route"
    return Route(slack_secrets=(slack,), emails=tuple(emails), reason=why, owner_email=owner)


def slack_target(finding: Finding, policy: NotificationsPolicy) -> str:
    """The finding's Slack channel: its team's webhook secret (else the default), or ``channel:<id>`` when the bot
    token posts there (``slack_channel``, so the message can be updated in place later). One digest per target."""
    team = policy.teams.get(finding.team or "")
    slack = (team.slack_secret_name if team and team.slack_secret_name else None) or policy.slack_secret_name
    channel = bot_channel(finding, policy)
    return f"{BOT_CHANNEL}{channel}" if channel else slack


def bot_channel(finding: Finding, policy: NotificationsPolicy) -> str | None:
    """The channel id the bot token posts the finding's team's messages to (``slack_channel``), None with a webhook."""
    team = policy.teams.get(finding.team or "")
    return (team.slack_channel if team and team.slack_channel else None) or policy.slack_channel


#: Findings whose point is lost if they wait for the channel's digest: an idle stop is due at the end of the warning
#: period, a Spot interruption comes within two minutes, a clicked button's answer is awaited now.
#: Each capability's registry entry says whether its findings are (``time_bound``).
TIME_BOUND_POLICIES = REGISTRY.policies_where(lambda capability: capability.time_bound)


#: Idle outcomes nothing comes of now: "would be stopped now (report-only: not done)" and "reported, not reclaimed".
#: The owner was warned once for the episode; these are the report's business (its idle findings and the team
#: digest), not a post per instance per sweep.
REPORT_ONLY_OUTCOMES = frozenset({"idle.acted", "idle.reported"})

#: Idle findings about money, not about a stop to come: paying twice beside a reservation, a stopped instance still
#: billing its volumes and addresses (``governor.idle.money``). Told in the team's daily digest, once a day.
MONEY_OUTCOMES = frozenset({"idle.paying-twice", "idle.stopped-billing"})

#: Rules that withdraw an episode's warning (registry ``episode_withdrawals``): the resource is no longer judged idle,
#: so nothing will be done and there is nothing to act on. They never post a message of their own (see
#: :func:`decide_notification`).
WITHDRAWALS = frozenset(rule for capability in REGISTRY.values() for rule in capability.episode_withdrawals)


def time_bound(finding: Finding) -> bool:
    """A finding whose point is lost if it waits a day: a time-bound policy's, unless it says only what would have
    been done (a report-only idle stop, an instance reported and not reclaimed)."""
    if finding.policy not in TIME_BOUND_POLICIES or finding.rule in WITHDRAWALS | MONEY_OUTCOMES:
        return False
    return not (finding.rule in REPORT_ONLY_OUTCOMES and (finding.rule == "idle.reported" or not finding.enforced))


#: Per time-bound policy, which of its findings are due (registry ``due``); a policy without a test: all of them.
DUE_TESTS = {
    policy: capability.due
    for capability in REGISTRY.values()
    if capability.time_bound
    for policy in capability.policies
}


def due(finding: Finding) -> bool:
    """A time-bound finding that something will happen to soon, which a person can still change: a Spot warning
    (AWS's two minutes), the warning of an idle stop that will happen. A report-only idle warning is not: nothing
    will happen, so it can wait for the channel's digest (with its buttons, see ``governor.notifier.digest``)."""
    if not time_bound(finding):
        return False
    test = DUE_TESTS.get(finding.policy)
    return test is None or test(finding)


def posts_now(finding: Finding, policy: NotificationsPolicy) -> bool:
    """``immediate: all`` posts everything at once; ``due`` (shipped) only what is due (:func:`due`); ``critical``
    only criticals; ``actionable`` criticals and the time-bound findings (:func:`time_bound`). Everything else waits
    for the channel's digest, every ``digest_hours``."""
    if policy.immediate == "all":
        return True
    if policy.immediate == "due":
        return due(finding)
    if finding.severity == "critical":
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
    #: The Slack target whose next digest lists the finding (``governor.notifier.digest``), when it is held.
    held_for: str | None = None

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
        decision = notification_decision(finding, "ok", [where.reason], [], "notifications.digest")
        return NotificationPlan(decision, held_for=where.held_for)
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
    posted before ``slack_channel`` was set or older than its record) the channel's next digest lists it as fixed."""
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
    why = f"a withdrawn warning never posts a message of its own; {where}: the channel's next digest lists it as fixed"
    decision = notification_decision(finding, "ok", [why], [], "notifications.digest")
    return NotificationPlan(decision, held_for=slack_target(finding, policy))
