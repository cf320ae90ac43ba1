"""At most once for SSM ``SendCommand``, which takes no client token.

Before sending, the intent is claimed with a conditional write (``attribute_not_exists``) under a deterministic id
(event id + instance + document); the id travels in the command's ``Comment``, and the CommandId is stored after.
A retry that finds the intent with a CommandId reuses it; one that finds the intent without a CommandId (the earlier
attempt died between sending and recording, or its answer was lost) looks the command up by its Comment and sends
only when SSM has no such command, i.e. the earlier send was never accepted.

A protocol over two ports (the ledger and the commands adapter, both passed in), so the typed ``Checkpoint`` action
runs it without importing the runtime; the commands adapter logs and counts a command it finds instead of resending.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from governor.domain.ids import deterministic_id

if TYPE_CHECKING:  # the port is a type here; the typed actions, which ports' signatures name, import this module
    from governor.domain.ports import Ledger

INTENT_KIND = "intent"
IN_DOUBT = (
    "in doubt: an earlier attempt failed between sending the command and recording its id; not sent again, so the "
    "job is not signalled twice"
)
DOCUMENT = "AWS-RunShellScript"


class Sent(Protocol):
    delivered: bool
    command_id: str | None
    error: str | None


@dataclass(frozen=True)
class OnceResult:
    """How the command ended for this attempt; ``reused`` when an earlier attempt had already sent it."""

    delivered: bool
    command_id: str | None = None
    error: str | None = None
    reused: bool = False


def intent_id(event_id: str, instance_id: str, document: str = DOCUMENT) -> str:
    return deterministic_id("send-command", event_id, instance_id, document)


def comment_for(intent: str, what: str = "checkpoint") -> str:
    """The Comment that carries the intent id (SSM allows 100 characters)."""
    return f"governor {what} {intent}"[:100]


def send_command_once(
    ledger: Ledger,
    commands: Any,
    *,
    event_id: str,
    instance_id: str,
    command: str,
    timeout_seconds: int,
    what: str = "checkpoint",
    document: str = DOCUMENT,
) -> OnceResult:
    """Send ``command`` to ``instance_id`` at most once for this event, however often this is called."""
    key = intent_id(event_id, instance_id, document)
    comment = comment_for(key, what)
    token = uuid.uuid4().hex
    base = {"event_id": event_id, "instance_id": instance_id, "document": document, "comment": comment}
    found = ledger.get_item(INTENT_KIND, key)
    mine = False
    if found is None:
        mine = ledger.claim(INTENT_KIND, key, {**base, "token": token})
        if not mine:  # the claim's answer was lost and botocore resent it, or someone else claimed in between
            found = ledger.get_item(INTENT_KIND, key)
            mine = found is not None and found.get("token") == token
    if not mine and found is not None:
        if found.get("command_id"):
            return OnceResult(True, str(found["command_id"]), reused=True)
        if found.get("error"):
            return OnceResult(False, error=str(found["error"]), reused=True)
        finder = getattr(commands, "find", None)
        earlier = finder(instance_id, comment) if callable(finder) else None
        if earlier:
            ledger.put_item(INTENT_KIND, key, {**base, "command_id": earlier, "delivered": True})
            return OnceResult(True, earlier, reused=True)
        if not callable(finder):  # nothing can prove the earlier send never arrived: do not risk a second one
            return OnceResult(False, error=IN_DOUBT, reused=True)
    sent: Sent = commands.send(instance_id, command, timeout_seconds, comment=comment)
    ledger.put_item(
        INTENT_KIND,
        key,
        {**base, "token": token, "command_id": sent.command_id, "delivered": sent.delivered, "error": sent.error},
    )
    return OnceResult(sent.delivered, sent.command_id, sent.error)
