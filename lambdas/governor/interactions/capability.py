"""The ``interactions`` capability, declared: the Slack app's buttons (Keep, Keep until tomorrow, Stop now,
Acknowledge), verified and authorised; the Slack app itself (its bot token and people) is configured here."""

from __future__ import annotations

from governor.capability import Capability, SlackApp, Trigger, Uses
from governor.core_policy import CorePolicy, section_of
from governor.domain.actions import Record, Tag
from governor.interactions.policy import InteractionsPolicy


def _interactions(policy: CorePolicy) -> InteractionsPolicy:
    return section_of(policy, "interactions", InteractionsPolicy)


def _slack_app(policy: CorePolicy) -> SlackApp:
    own = _interactions(policy)
    return SlackApp(bot_token_secret_name=own.bot_token_secret_name, people=dict(own.slack_users))


def channels_need_the_bot(policy: CorePolicy) -> None:
    """Posting to a channel id (``notifications``) needs the Slack app's bot token; a webhook needs none."""
    notifications = policy.notifications
    uses = [
        path
        for path, channel in (
            ("notifications.slack_channel", notifications.slack_channel),
            *(
                (f"notifications.teams.{name}.slack_channel", t.slack_channel)
                for name, t in notifications.teams.items()
            ),
        )
        if channel
    ]
    if uses and not _interactions(policy).bot_token_secret_name:
        raise ValueError(f"{uses[0]} posts with the Slack bot token: set interactions.bot_token_secret_name")


CAPABILITY = Capability(
    name="interactions",
    demo="governor_cli.demo.capabilities.interactions",
    construct="infra.constructs.interactions:SlackInteractions",
    construct_id="Interactions",
    time_bound=True,
    section="interactions",
    section_model=InteractionsPolicy,
    checks=(channels_need_the_bot,),
    description="Slack buttons: Keep, Keep until tomorrow, Stop now, Acknowledge (verified, authorised)",
    triggers=(
        Trigger(
            "FunctionUrl",
            "url",
            "Function URL (auth NONE; every request must carry Slack's v0 signature)",
            when=lambda policy: _interactions(policy).buttons,  # no public endpoint while buttons are off
        ),
    ),
    uses=(
        Uses("governor.adapters.ec2"),
        Uses("governor.adapters.slack_app", ("SlackSecrets.IAM_ACTIONS",)),
        Uses("governor.interactions.slack_calls", ("AsyncInvoker.IAM_ACTIONS",)),
    ),
    actions=(Tag, Record),
    # Stop now is handed to the function that carries out ``stop`` (``Registry.carrying_out``), which re-checks
    delegated=frozenset({"stop"}),
    buttons="governor.interactions.domain:message_buttons",
    secrets=lambda policy: _interactions(policy).secret_names(),
    slack_app=_slack_app,
)
