"""Email through SESv2 ``SendEmail``: HTML with a plain-text alternative, inline images and attachments.

The message is built as MIME and sent as ``Content.Raw``, so the structure is exactly what we test:
``multipart/mixed`` ⊃ (``multipart/alternative`` ⊃ (text, ``multipart/related`` ⊃ (html, inline PNGs)), attachments).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from governor.adapters.aws import client
from governor.domain.escape import email_header

IAM_ACTIONS = frozenset({"ses:SendEmail"})
MAX_MESSAGE_BYTES = 40 * 1024 * 1024


@dataclass(frozen=True)
class Attachment:
    """A file attached to the email (CSV tables), or an inline image when ``inline_cid`` is set."""

    filename: str
    content: bytes
    mime_type: str = "text/csv"
    inline_cid: str | None = None


def build_mime(
    *,
    sender: str,
    recipients: Sequence[str],
    subject: str,
    html: str,
    text: str,
    attachments: Sequence[Attachment] = (),
) -> bytes:
    """The raw message; inline images are referenced from the HTML as ``cid:<inline_cid>``."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = ", ".join(recipients)
    message["Subject"] = email_header(subject)  # a CR/LF from a tag must not make every retry fail
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid(domain=sender.partition("@")[2] or None)
    message.set_content(text)
    message.add_alternative(html, subtype="html")
    inline = [a for a in attachments if a.inline_cid]
    if inline:
        html_part = next(part for part in message.iter_parts() if part.get_content_type() == "text/html")
        assert isinstance(html_part, EmailMessage)
        for image in inline:
            maintype, _, subtype = image.mime_type.partition("/")
            html_part.add_related(
                image.content, maintype=maintype, subtype=subtype, cid=f"<{image.inline_cid}>", filename=image.filename
            )
    for attachment in attachments:
        if attachment.inline_cid:
            continue
        maintype, _, subtype = attachment.mime_type.partition("/")
        message.add_attachment(attachment.content, maintype=maintype, subtype=subtype, filename=attachment.filename)
    raw = message.as_bytes()
    if len(raw) > MAX_MESSAGE_BYTES:
        raise ValueError(f"email is {len(raw)} bytes, over SES's 40 MB limit")
    return raw


class SesMailer:
    """Sends from a verified SES identity (``notifications.email_sender``)."""

    def __init__(self, sender: str, region: str | None = None) -> None:
        self.sender = sender
        self._ses = client("sesv2", region)

    def send(
        self,
        recipients: Sequence[str],
        subject: str,
        html: str,
        text: str,
        attachments: Sequence[Attachment] = (),
    ) -> str:
        raw = build_mime(
            sender=self.sender, recipients=recipients, subject=subject, html=html, text=text, attachments=attachments
        )
        response = self._ses.send_email(
            FromEmailAddress=self.sender,
            Destination={"ToAddresses": list(recipients)},
            Content={"Raw": {"Data": raw}},
        )
        return str(response.get("MessageId", ""))
