"""Slack buttons on governor messages: which buttons a finding gets, what a click says, who may click, how long a Keep.

Pure. A button carries only an opaque token; the notifier keeps what the token stands for (the finding's resource,
rule, owner and team) in the ledger, so nothing in a click chooses what the governor touches. The endpoint verifies
Slack's signature before :func:`parse_click` ever sees the body.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import zoneinfo
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs

from pydantic import Field, ValidationError

from governor.domain import messages
from governor.domain.decision import Finding
from governor.domain.escape import slack_text
from governor.domain.messages import Buttons
from governor.domain.messages import updated_message as updated_message
from governor.domain.model import Model
from governor.events.names import BUTTON_KIND as BUTTON_KIND
from governor.events.names import INTERACTIONS_SOURCE, STOP_NOW_ACTION
from governor.events.names import STOP_REQUEST_KIND as STOP_REQUEST_KIND
from governor.events.names import STOP_REQUESTED as STOP_REQUESTED
from governor.policy import Policy
from governor.registry import REGISTRY

KEEP_HOURS = "governor_keep_hours"
KEEP_MORNING = "governor_keep_morning"
STOP_NOW = STOP_NOW_ACTION
ACKNOWLEDGE = "governor_acknowledge"
IDLE_BUTTONS = (KEEP_HOURS, KEEP_MORNING, STOP_NOW)
ActionId = Literal["governor_keep_hours", "governor_keep_morning", "governor_stop_now", "governor_acknowledge"]
#: Findings whose messages carry "Acknowledge": their capabilities' registry entries say so (``acknowledgeable``).
ACKNOWLEDGED_POLICIES = REGISTRY.policies_where(lambda capability: capability.acknowledgeable)
SOURCE = INTERACTIONS_SOURCE
CLICKED = "Slack Button Clicked"
TOKEN = re.compile(r"^[0-9a-f]{32}$")
MAX_MESSAGE_BLOCKS = 50
#: Slack's block_actions payload carries the message it was clicked on (at most 50 blocks of 3,000 characters, URL
#: encoded): a body larger than this is no click of ours and is answered 400 before the signature is even computed.
MAX_BODY_BYTES = 256 * 1024
#: The form fields a click has (one: ``payload``); a body with more is answered 400.
MAX_FORM_FIELDS = 20


class ClickError(ValueError):
    """A signed request that is not a click on one of the governor's buttons; the answer is one line, nothing acts."""


def button_token(finding: Finding) -> str:
    """Opaque and stable: the same finding delivered twice gets the same token (the ledger entry is overwritten)."""
    seed = f"{finding.event_id}|{finding.rule}|{finding.resource}|{finding.at.isoformat()}"
    return hashlib.sha256(seed.encode()).hexdigest()[:32]


def buttons_for(finding: Finding) -> list[str]:
    """Idle warnings: Keep 4 h, Keep until tomorrow, Stop now. Spot and security findings: Acknowledge.

    A warning whose instance is only ever reported (``planned: report``: an EKS node its cluster does not let the
    governor drain, a Capacity Block, an Auto Scaling member under ``asg_action: report``) has no Stop now: the idle
    function would refuse it for the same reason, so the button could not work."""
    if finding.rule == "idle.warned":
        reported_only = any(a.get("type") == "warn" and a.get("planned") == "report" for a in finding.actions)
        return [b for b in IDLE_BUTTONS if b != STOP_NOW] if reported_only else list(IDLE_BUTTONS)
    if finding.policy in ACKNOWLEDGED_POLICIES:
        return [ACKNOWLEDGE]
    return []


def button_record(finding: Finding, token: str) -> dict[str, Any]:
    """What the token stands for, kept in the ledger: the only source of the resource a click acts on."""
    return {
        "token": token,
        "policy": finding.policy,
        "rule": finding.rule,
        "resource": finding.resource,
        "owner": finding.owner,
        "team": finding.team,
        "account": finding.account,
        "region": finding.region,
        "event_id": finding.event_id,
        "title": finding.title,
        "buttons": buttons_for(finding),
    }


def actions_block(token: str, buttons: list[str], policy: Policy, stops: bool = True) -> dict[str, Any]:
    """The Block Kit actions block; every button's value is the token and nothing else. ``stops``: a Stop now click
    would stop (the buttons and the warning's policy enforce); otherwise its confirmation says it would not."""
    hours = policy.interactions.keep_hours
    morning = policy.interactions.morning_hour
    labels = {
        KEEP_HOURS: (f"Keep {hours} h", None),
        KEEP_MORNING: (f"Keep until tomorrow {morning:02d}:00", None),
        STOP_NOW: ("Stop now", "danger"),
        ACKNOWLEDGE: ("Acknowledge", "primary"),
    }
    elements = []
    for action_id in buttons:
        label, style = labels[action_id]
        button: dict[str, Any] = {
            "type": "button",
            "action_id": action_id,
            "text": {"type": "plain_text", "text": label},
            "value": token,
        }
        if style:
            button["style"] = style
        if action_id == STOP_NOW:
            button["confirm"] = {
                "title": {"type": "plain_text", "text": "Stop this instance now?"},
                "text": {"type": "mrkdwn", "text": STOP_CONFIRM if stops else STOP_CONFIRM_REPORT_ONLY},
                "confirm": {"type": "plain_text", "text": "Stop now"},
                "deny": {"type": "plain_text", "text": "Cancel"},
            }
        elements.append(button)
    return {"type": "actions", "block_id": f"governor:{token}", "elements": elements}


#: What the Stop now confirmation says, as the click will be answered: a stop, or (report-only) what would be done.
STOP_CONFIRM = "The governor re-checks that it is still idle, then stops it."
STOP_CONFIRM_REPORT_ONLY = (
    "Report-only: the governor re-checks that it is still idle and says whether it would stop it; nothing is stopped."
)


def message_buttons(finding: Finding, policy: Policy, expires_at: int) -> Buttons | None:
    """The buttons a finding's message carries while ``interactions.buttons`` is on (registry ``buttons``: the notifier
    attaches them), with the ledger item their token stands for, valid until ``expires_at`` (epoch seconds)."""
    chosen = buttons_for(finding) if policy.interactions.buttons else []
    if not chosen:
        return None
    token = button_token(finding)
    record = {**button_record(finding, token), "expires_at": expires_at}
    stops = policy.interactions.enforce and finding.enforced  # the warning's own policy enforces, and so do clicks
    return Buttons(actions_block(token, chosen, policy, stops), BUTTON_KIND, token, record)


class Click(Model):
    """One verified button click, as the endpoint hands it to its worker."""

    token: str = Field(pattern=TOKEN.pattern)
    action_id: ActionId
    action_ts: str = Field(min_length=1, max_length=40)
    user_id: str = Field(pattern=r"^[UW][A-Z0-9]{2,30}$")
    user_name: str | None = Field(None, max_length=200)
    workspace: str | None = Field(None, max_length=40)
    response_url: str = Field(max_length=2000)
    message_blocks: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_MESSAGE_BLOCKS)
    #: When Slack sent the click: its request timestamp, as the endpoint verified it (signed, within five minutes).
    #: The worker judges a click's age by it, and Stop now's record carries it (``governor.events.stop_request``).
    signed_at: dt.datetime | None = None

    @property
    def key(self) -> str:
        """Slack's action: the same click delivered again (a retry, a replayed request) has the same key."""
        return f"slack:{self.action_id}:{self.token}:{self.user_id}:{self.action_ts}"


def check_response_url(url: str) -> str:
    """Slack's documented ``response_url`` only (:func:`governor.domain.messages.check_response_url`); anything else is
    no click of ours."""
    try:
        return messages.check_response_url(url)
    except messages.NotSlackAddressError as error:
        raise ClickError(str(error)) from None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _payload(body: str) -> dict[str, Any]:
    """The form's one ``payload`` field, as JSON, of a ``block_actions`` click."""
    if len(body.encode()) > MAX_BODY_BYTES:
        raise ClickError(f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        fields = parse_qs(body, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS, strict_parsing=False)
    except ValueError:
        raise ClickError(f"the body is not a form of at most {MAX_FORM_FIELDS} fields") from None
    values = fields.get("payload") or []
    if len(values) != 1:
        raise ClickError("the body has no single payload= field")
    try:
        payload = json.loads(values[0])
    except (json.JSONDecodeError, RecursionError):
        raise ClickError("payload is not JSON") from None
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        kind = payload.get("type") if isinstance(payload, dict) else type(payload).__name__
        raise ClickError(f"payload type {kind!r} is not a block_actions click")
    return payload


def _click(payload: dict[str, Any]) -> Click:
    """The one action of the click, who clicked it in which workspace, and the message it was on."""
    actions = payload.get("actions")
    if not isinstance(actions, list) or len(actions) != 1 or not isinstance(actions[0], dict):
        raise ClickError("a click carries exactly one action")
    action = actions[0]
    user = _mapping(payload.get("user"))
    raw_blocks = _mapping(payload.get("message")).get("blocks")
    blocks: list[Any] = raw_blocks if isinstance(raw_blocks, list) else []
    return Click(
        token=str(action.get("value") or ""),
        action_id=action.get("action_id"),
        action_ts=str(action.get("action_ts") or ""),
        user_id=str(user.get("id") or ""),
        user_name=user.get("username") or user.get("name"),
        workspace=_mapping(payload.get("team")).get("id"),
        response_url=str(payload.get("response_url") or ""),
        message_blocks=[b for b in blocks if isinstance(b, dict)][:MAX_MESSAGE_BLOCKS],
    )


def parse_click(body: str) -> Click:
    """``application/x-www-form-urlencoded`` with one ``payload`` field of JSON: a ``block_actions`` click on one of
    the governor's buttons. Anything else raises :class:`ClickError` with one line saying what is wrong."""
    payload = _payload(body)
    try:
        click = _click(payload)
    except ValidationError as error:
        first = error.errors(include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "payload"
        raise ClickError(f"{where}: {first['msg']}") from None
    check_response_url(click.response_url)
    return click


# --- who may click ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Person:
    """The person behind a Slack user: an email from the policy's ``slack_users`` or Slack's ``users.info``."""

    slack_user: str
    email: str | None
    source: Literal["policy", "slack", "unknown"]

    @property
    def label(self) -> str:
        return f"{self.email or 'unknown person'} (Slack {self.slack_user})"


def person_from_policy(slack_user: str, policy: Policy) -> Person | None:
    email = policy.interactions.slack_users.get(slack_user)
    return Person(slack_user, email.lower(), "policy") if email else None


def authorise(person: Person, owner: str | None, team: str | None, policy: Policy) -> tuple[bool, str]:
    """Owner, a member of the owning team, or an admin; nobody else.

    ``owner`` and ``team`` are what the governor recorded when it sent the message (the button's ledger record), not
    what the tags say at click time: retagging ``team=`` after a warning gives another team nothing. The owner matches
    only by full identity, the whole address: a bare ``ana`` would match ``ana@corp.example`` and
    ``ana@contractor.example`` alike.
    """
    if person.email is None:
        return False, f"Slack user {person.slack_user} resolves to no person (not in interactions.slack_users)"
    email = person.email.lower()
    if email in {a.lower() for a in policy.interactions.admins}:
        return True, f"{email} is in interactions.admins"
    tag = (owner or "").strip().lower()
    if tag and tag == email:
        return True, f"{email} owns it (tag {policy.fleet.owner_tag}={owner})"
    members = policy.interactions.teams.get(team or "")
    if team and members and email in {m.lower() for m in members.members}:
        return True, f"{email} is a member of team {team}"
    return False, f"{email} is not its owner ({owner or 'unknown'}), not in team {team or 'unknown'} and not an admin"


def button_expired(record: dict[str, Any], now: dt.datetime) -> str | None:
    """Why a button no longer acts: its record's ``expires_at`` (set when the message was sent) has passed. DynamoDB's
    TTL removes the record only days later, so the handler checks the time itself."""
    expires = record.get("expires_at")
    try:
        at = dt.datetime.fromtimestamp(float(expires), dt.UTC) if expires is not None else None
    except (TypeError, ValueError, OverflowError):
        return "this button's record has no valid expiry; it acts on nothing"
    if at is not None and now >= at:
        return f"this button expired at {at.isoformat()}; wait for the next message"
    return None


def ownership_changes(owner: str | None, team: str | None, live: Any) -> list[str]:
    """How the instance's owner and team tags changed since the message was sent (recorded with the click, and never
    used to authorise it)."""
    notes = []
    if (live.owner or "") != (owner or "") and live.source == "tag":
        notes.append(f"owner tag changed since the message: {owner or 'unknown'} -> {live.owner}")
    if (live.team or "unknown") != (team or "unknown"):
        notes.append(f"team tag changed since the message: {team or 'unknown'} -> {live.team}")
    return notes


# --- how long a Keep ----------------------------------------------------------------------------------------------


def team_zone(team: str | None, policy: Policy) -> tuple[dt.tzinfo, str]:
    """The team's time zone from ``interactions.teams``; UTC when none is set or the zone database lacks it."""
    members = policy.interactions.teams.get(team or "")
    name = members.timezone if members else "UTC"
    try:
        return zoneinfo.ZoneInfo(name), name
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return dt.UTC, "UTC"


def keep_until(action_id: str, now: dt.datetime, team: str | None, policy: Policy) -> tuple[dt.datetime | None, str]:
    """The snooze a Keep button asks for, never beyond ``fleet.max_snooze_days``; None when snoozing is off."""
    limit_days = policy.fleet.max_snooze_days
    if limit_days <= 0:
        return None, "fleet.max_snooze_days is 0: snoozes are switched off"
    if action_id == KEEP_HOURS:
        hours = policy.interactions.keep_hours
        until, what = now + dt.timedelta(hours=hours), f"{hours} h"
    else:
        zone, name = team_zone(team, policy)
        local = now.astimezone(zone)
        morning = dt.datetime.combine(
            local.date() + dt.timedelta(days=1), dt.time(policy.interactions.morning_hour), tzinfo=zone
        )
        until, what = morning.astimezone(dt.UTC), f"tomorrow {policy.interactions.morning_hour:02d}:00 {name}"
    limit = now + dt.timedelta(days=limit_days)
    if until > limit:
        return limit, f"{what} capped at fleet.max_snooze_days ({limit_days})"
    return until, what


# --- what the message says afterwards ---------------------------------------------------------------------------


def ephemeral(text: str) -> dict[str, Any]:
    """An answer only the clicking user sees; the message stays as it was."""
    return {"response_type": "ephemeral", "replace_original": False, "text": slack_text(text)[:3000]}
