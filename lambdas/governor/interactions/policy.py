"""The ``interactions`` section of governor.yaml, declared here (the registry entry names it;
``governor.policy`` adds it to ``Policy``)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from governor.policy_types import Section

SlackUserId = Annotated[str, Field(pattern=r"^[UW][A-Z0-9]{2,30}$")]
Email = Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)]


def _time_zone(value: str) -> str:
    """An IANA zone name (``Europe/Berlin``); checked against the zone database when this machine has one."""
    import zoneinfo

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*", value):
        raise ValueError(f"{value!r} is not an IANA time zone name such as Europe/Berlin")
    if zoneinfo.available_timezones() and value not in zoneinfo.available_timezones():
        raise ValueError(f"{value!r} is not a known IANA time zone")
    return value


class TeamMembers(Section):
    """Who belongs to a team (for acting on its instances from Slack) and the team's time zone ("tomorrow 09:00")."""

    members: list[Email] = Field(default_factory=list)
    timezone: Annotated[str, AfterValidator(_time_zone)] = "UTC"


class InteractionsPolicy(Section):
    """The Slack buttons on idle warnings (Keep 4 h, Keep until tomorrow, Stop now) and on findings (Acknowledge).

    ``enforce: false`` verifies, authorises and records every click, and answers in Slack what it would have done;
    only ``enforce: true`` writes the snooze tag or asks the idle function to stop. ``buttons`` puts them on
    messages (switch it on once the Slack app's interactivity URL points at the endpoint, see docs/slack.md).
    """

    enforce: bool = False
    buttons: bool = False
    signing_secret_name: str = "governor/slack-signing-secret"  # noqa: S105 - a secret's name, not its value
    # Optional: a bot token (users:read.email) to resolve clicking users not listed in slack_users.
    bot_token_secret_name: str | None = None
    slack_users: dict[SlackUserId, Email] = Field(default_factory=dict)
    admins: list[Email] = Field(default_factory=list)
    teams: dict[Annotated[str, Field(min_length=1, max_length=64)], TeamMembers] = Field(default_factory=dict)
    keep_hours: int = Field(4, ge=1, le=24 * 7)
    morning_hour: int = Field(9, ge=0, le=23)
    # The public endpoint's throttle: at most this many requests at once (reserved concurrency, counted by the deploy's
    # preflight; only while ``buttons`` is on, since the endpoint exists only then). null: unthrottled.
    reserved_concurrency: int | None = Field(5, ge=1, le=100)

    def endpoint_concurrency(self) -> int:
        """The executions the public endpoint reserves: none while buttons are off (no endpoint is deployed)."""
        return (self.reserved_concurrency or 0) if self.buttons else 0

    def bot_token_names(self) -> list[str]:
        """The bot token's secret, when the policy names one (``users.lookupByEmail``, ``chat.postMessage``)."""
        return [self.bot_token_secret_name] if self.bot_token_secret_name else []

    def secret_names(self) -> list[str]:
        """The Slack app's secrets: the signing secret, and the bot token when the policy names one."""
        return sorted({self.signing_secret_name, *self.bot_token_names()})
