"""Slack Block Kit and email shapes, within Slack's limits: what the governor's messages are made of, whichever
function renders them (findings, the report's digest) or updates them (a click's answer).

Slack's limits (50 blocks a message, 3,000 characters a section text, 150 a header) are enforced here, so no adapter
ever posts a payload Slack would reject. Pure: no capability's routing or merging, so every function renders and
answers without loading another's code. A message's buttons are made by the capability that answers them
(:class:`Buttons`, registry ``buttons``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from governor.domain.escape import slack_text

MAX_BLOCKS = 50
MAX_SECTION_CHARS = 3000
MAX_HEADER_CHARS = 150
MAX_FALLBACK_CHARS = 3000

Block = dict[str, Any]
Message = dict[str, Any]


@dataclass(frozen=True)
class Email:
    """An email's subject with HTML and plain-text bodies; attachments are added by the caller."""

    subject: str
    html: str
    text: str


def split_text(text: str, limit: int = MAX_SECTION_CHARS) -> list[str]:
    """Cut text into chunks of at most ``limit`` characters, at line breaks where possible."""
    chunks: list[str] = []
    current = ""
    for line in text.split("\n"):
        while len(line) > limit:
            if current:
                chunks.append(current)
                current = ""
            chunks.append(line[:limit])
            line = line[limit:]
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) > limit:
            chunks.append(current)
            current = line
        else:
            current = candidate
    if current or not chunks:
        chunks.append(current)
    return chunks


def section(text: str) -> list[Block]:
    """One or more mrkdwn section blocks carrying ``text``, each within the 3,000-character limit."""
    return [{"type": "section", "text": {"type": "mrkdwn", "text": chunk}} for chunk in split_text(text) if chunk]


def header(text: str) -> Block:
    """A plain-text header; callers pass text already escaped, since Slack parses ``<...>`` in every text field."""
    clipped = text if len(text) <= MAX_HEADER_CHARS else text[: MAX_HEADER_CHARS - 1] + "…"
    return {"type": "header", "text": {"type": "plain_text", "text": clipped, "emoji": True}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": split_text(text)[0]}]}


def pack_messages(groups: Sequence[list[Block]], fallback: str, title: Block | None = None) -> list[Message]:
    """Pack groups of blocks into as few messages as Slack allows, keeping a group together when it fits.

    Every message repeats ``title`` (with "(part n/N)" when there are several) and carries a plain ``text``
    fallback for notifications; a group larger than one message is split across messages.
    """
    room = MAX_BLOCKS - (1 if title else 0)
    pages: list[list[Block]] = [[]]
    for group in groups:
        if len(pages[-1]) + len(group) > room and pages[-1]:
            pages.append([])
        for block in group:
            if len(pages[-1]) >= room:
                pages.append([])
            pages[-1].append(block)
    messages: list[Message] = []
    for number, blocks in enumerate(pages, start=1):
        head: list[Block] = []
        if title is not None:
            text = title["text"]["text"]
            if len(pages) > 1:
                text = f"{text} (part {number}/{len(pages)})"
            head = [header(text)]
        note = fallback if len(pages) == 1 else f"{fallback} (part {number}/{len(pages)})"
        messages.append({"text": note[:MAX_FALLBACK_CHARS], "blocks": head + blocks})
    return messages


@dataclass(frozen=True)
class Buttons:
    """A message's buttons: the Block Kit actions block, and the ledger item (``kind``, ``key``) its opaque token
    stands for, which the capability answering the clicks reads back; nothing in a click chooses what is touched."""

    block: Block
    kind: str
    key: str
    record: dict[str, Any]


#: The hosts Slack documents for ``response_url`` (``https://hooks.slack.com/actions/...``; GovSlack runs on
#: ``slack-gov.com``). Nothing else is ever posted to: a URL in a click or a Stop now request is not a way to make the
#: governor call an internal address.
SLACK_HOSTS = frozenset({"hooks.slack.com", "hooks.slack-gov.com"})
RESPONSE_PATH = "/actions/"


class NotSlackAddressError(ValueError):
    """A ``response_url`` that is not Slack's: nothing is posted to it."""


def check_response_url(url: str) -> str:
    """Slack's documented ``response_url``: https, one of :data:`SLACK_HOSTS`, no port or credentials, ``/actions/``.

    Nothing else, loopback included (127.0.0.1 in Lambda is the runtime API): the local demo answers through Slack's
    host too, and its tooling redirects the transport (``governor_cli.demo.capture.slack_answers_to``).
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise NotSlackAddressError("response_url is not a URL") from None
    plain = port is None and parts.username is None and parts.password is None and "\\" not in url
    if parts.scheme == "https" and parts.hostname in SLACK_HOSTS and plain and parts.path.startswith(RESPONSE_PATH):
        return url
    raise NotSlackAddressError(
        "response_url is not a https://hooks.slack.com/actions/ (or hooks.slack-gov.com) address"
    )


def updated_message(blocks: list[Block], token: str, note: str) -> Message:
    """The original message without this token's buttons, plus one line saying who did what."""
    blocks = [b for b in blocks if b.get("block_id") != f"governor:{token}"]
    blocks = blocks[: MAX_BLOCKS - 1]
    shown = slack_text(note)[:MAX_SECTION_CHARS]  # the fallback ``text`` too: Slack parses <...> and formatting in both
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": shown}]})
    return {"replace_original": True, "text": shown, "blocks": blocks}
