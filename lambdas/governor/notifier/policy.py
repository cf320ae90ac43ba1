"""The ``notifications`` section of governor.yaml, declared here (the registry entry names it;
``governor.policy`` adds it to ``Policy``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from governor.policy_types import Section

#: A Slack channel id (``C…`` public, ``G…`` private), for posting with the bot token.
SlackChannelId = Annotated[str, Field(pattern=r"^[CG][A-Z0-9]{2,30}$")]


class TeamRoute(Section):
    slack_secret_name: str | None = None
    #: Post with the bot token (``interactions.bot_token_secret_name``) to this channel instead of the webhook.
    slack_channel: SlackChannelId | None = None
    email: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(default_factory=list)


class NotificationsPolicy(Section):
    """Where findings go; ``enforce: false`` logs and archives them on the bus without sending to Slack or email."""

    enforce: bool = True
    slack_secret_name: str = "governor/slack-webhook"  # noqa: S105 - a secret's name, not its value
    #: Post with the bot token (``interactions.bot_token_secret_name``, scope ``chat:write``) to this channel id
    #: instead of the webhook: the governor then knows each message's ``ts`` and updates an idle episode's message
    #: in place (warned -> stopped) rather than posting again. Unset: the webhook, one post per message.
    slack_channel: SlackChannelId | None = None
    email_sender: str | None = Field(None, pattern=r"^[^@\s]+@[^@\s]+$")
    email_recipients: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(default_factory=list)
    min_severity: Literal["info", "warning", "critical"] = "info"
    #: What is posted the moment it happens; the rest waits for the team's daily report digest. ``actionable``:
    #: criticals, and idle / Spot / button findings (time-bound); ``critical``: criticals only; ``all``: everything.
    immediate: Literal["actionable", "critical", "all"] = "actionable"
    merge_window_minutes: int = Field(60, ge=0, le=24 * 60)
    teams: dict[str, TeamRoute] = Field(default_factory=dict)
    dashboard_url: str | None = None
    owner_email_domains: list[Annotated[str, Field(pattern=r"^([a-z0-9-]+\.)+[a-z]{2,}$")]] = Field(
        default_factory=list
    )

    def slack_secret_names(self) -> list[str]:
        """Every Secrets Manager secret that may hold a webhook: the default channel and each team's."""
        names = {self.slack_secret_name}
        names.update(team.slack_secret_name for team in self.teams.values() if team.slack_secret_name)
        return sorted(names)
