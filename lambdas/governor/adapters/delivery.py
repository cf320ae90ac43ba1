"""How rendered messages leave the governor: Slack webhooks by secret name and SES email, behind one ``Outbox``.

The notifier sends findings through it and the report sends its digest; both treat :class:`UndeliverableError` (a
channel that cannot work: its secret is missing or wrong) as final. The Slack and SES adapters are imported when a
message is sent, so a report-only run never loads them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from governor.domain.messages import Email, Message

if TYPE_CHECKING:
    from governor.adapters.ses import Attachment

#: The ledger kind marking a message delivered to one channel (key ``<finding or event id>#<channel>``), so a retried
#: event sends only to the channels still missing it.
DELIVERY_KIND = "notify-delivery"


class UndeliverableError(RuntimeError):
    """A channel cannot be used at all (its secret is missing or wrong); retrying the event would not help."""


class Outbox(Protocol):
    """How rendered messages leave: Slack webhooks by secret name, SES email; tests pass fakes or local servers."""

    def post_slack(self, secret_name: str, messages: Sequence[Message]) -> None: ...

    def send_email(self, recipients: Sequence[str], email: Email, attachments: Sequence[Attachment] = ()) -> None: ...


@dataclass
class AwsOutbox:
    """Webhook URLs from Secrets Manager (cached per container, never logged); email from the verified sender."""

    region: str | None
    sender: str | None
    opener: Callable[..., Any] | None = None
    sleep: Callable[[float], None] | None = None
    _urls: dict[str, str] = field(default_factory=dict)

    def post_slack(self, secret_name: str, messages: Sequence[Message]) -> None:
        from governor.adapters.slack import SecretMissingError, SlackWebhook, webhook_url_from_secret

        try:
            url = self._urls.get(secret_name) or webhook_url_from_secret(secret_name, self.region)
        except SecretMissingError as error:
            raise UndeliverableError(str(error)) from None
        self._urls[secret_name] = url
        options: dict[str, Any] = {"label": f"Slack webhook '{secret_name}'"}
        if self.opener is not None:
            options["opener"] = self.opener
        if self.sleep is not None:
            options["sleep"] = self.sleep
        SlackWebhook(url, **options).post_all(messages)

    def send_email(self, recipients: Sequence[str], email: Email, attachments: Sequence[Attachment] = ()) -> None:
        from governor.adapters.ses import SesMailer

        if not self.sender:
            raise UndeliverableError("notifications.email_sender is not set: no email can be sent")
        SesMailer(self.sender, self.region).send(recipients, email.subject, email.html, email.text, attachments)
