"""At most once for SSM ``SendCommand``, which takes no client token.

Before sending, the intent is claimed with a conditional write (``attribute_not_exists``) under a deterministic id
(event id + instance + document); the id travels in the command's ``Comment``, and the CommandId is stored after.
A retry that finds the intent with a CommandId reuses it. One that finds the intent without a CommandId looks the
command up by its Comment; when SSM has none, the claim may still belong to an invocation that is sending right now
(two overlapping sweeps, a sweep and a Stop now click), so it is taken over only once it is older than
:data:`TAKEOVER_AFTER` (longer than any single-attempt send can take), and only by a conditional write on the
holder's token: of two late-comers one wins, and the holder's own send is never doubled.

What a command is at most once *per* is the caller's: an event (the default), an idle spell, or one interruption of
an instance (``governor.domain.interruptions.interruption_key``), passed as ``event_id``. :func:`first_claimant`
names the one event that owns such a wider scope, so the events after it are recorded as its duplicates.

A protocol over two ports (the ledger and the commands adapter, both passed in), so the typed ``Checkpoint`` action
runs it without importing the runtime; the commands adapter logs and counts a command it finds instead of resending.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from governor.domain.ids import deterministic_id

INTENT_KIND = "intent"
#: The ledger kind of a scope's owner (:func:`first_claimant`).
OWNER_KIND = "once-owner"
IN_DOUBT = (
    "in doubt: an earlier attempt failed between sending the command and recording its id; not sent again, so the "
    "job is not signalled twice"
)
IN_FLIGHT = "in flight: another invocation claimed this command moments ago and may be sending it; not sent twice"
DOCUMENT = "AWS-RunShellScript"
#: A claim without a command id younger than this may belong to a live invocation between claim and answer; the
#: SendCommand client makes one attempt (3 s connect + 15 s read timeout), so a minute is well past any live send.
TAKEOVER_AFTER = dt.timedelta(seconds=60)
#: The claim time of a released claim (the send was refused): any retry may take it over at once.
EPOCH = "1970-01-01T00:00:00+00:00"
#: Transport errors raised before the request left (botocore's names; the domain imports no botocore).
NOT_SENT_ERRORS = frozenset({"ConnectTimeoutError", "EndpointConnectionError", "ConnectionClosedError"})


class Intents(Protocol):
    """What the protocol needs of the ledger (``governor.domain.ports.Ledger`` is one), stated here: the typed actions,
    which the ledger port's signatures name, import this module, so importing the port would close a cycle."""

    def get_item(self, kind: str, key: str) -> dict[str, Any] | None: ...

    def put_item(self, kind: str, key: str, item: dict[str, Any]) -> None: ...

    def claim(self, kind: str, key: str, item: dict[str, Any], *, replacing: tuple[str, Any] | None = None) -> bool: ...


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


@dataclass(frozen=True)
class _Intent:
    """One attempt at a command: its intent id and Comment, the fields every write of it carries, this attempt's
    token and the time it started."""

    key: str
    instance_id: str
    comment: str
    base: dict[str, Any]
    token: str
    now: dt.datetime


def _claim(ledger: Intents, intent: _Intent) -> tuple[bool, dict[str, Any] | None]:
    """Whether this attempt holds the intent, and the intent as found when another attempt wrote it first."""
    found = ledger.get_item(INTENT_KIND, intent.key)
    if found is not None:
        return False, found
    claim = {**intent.base, "token": intent.token, "claimed_at": intent.now.isoformat()}
    if ledger.claim(INTENT_KIND, intent.key, claim):
        return True, None
    # the claim's answer was lost and botocore resent it, or someone else claimed in between
    found = ledger.get_item(INTENT_KIND, intent.key)
    return found is not None and found.get("token") == intent.token, found


def _held(ledger: Intents, commands: Any, intent: _Intent, found: dict[str, Any]) -> OnceResult | None:
    """What an intent another attempt claimed settles: its command id or error, a command SSM lists under its
    Comment, or that it may be in flight; None when nothing says it was sent and this attempt took it over."""
    if found.get("command_id"):
        return OnceResult(True, str(found["command_id"]), reused=True)
    if found.get("error"):
        return OnceResult(False, error=str(found["error"]), reused=True)
    finder = getattr(commands, "find", None)
    earlier = finder(intent.instance_id, intent.comment) if callable(finder) else None
    if earlier:
        ledger.put_item(INTENT_KIND, intent.key, {**intent.base, "command_id": earlier, "delivered": True})
        return OnceResult(True, earlier, reused=True)
    if not callable(finder):  # nothing can prove the earlier send never arrived: do not risk a second one
        return OnceResult(False, error=IN_DOUBT, reused=True)
    return _take_over(ledger, intent, found)


def _take_over(ledger: Intents, intent: _Intent, found: dict[str, Any]) -> OnceResult | None:
    """Take over a claim older than :data:`TAKEOVER_AFTER` (or released) by a conditional write on its holder's
    token; None when this attempt now holds it, ``IN_FLIGHT`` when its holder may be sending or another late-comer
    took it first."""
    claimed = _claimed_at(found)
    fresh = claimed is None or intent.now - claimed < TAKEOVER_AFTER
    if fresh and not found.get("released"):  # its holder may be sending right now
        return OnceResult(False, error=IN_FLIGHT, reused=True)
    holder = str(found.get("token") or "")
    taken = {**intent.base, "token": intent.token, "claimed_at": intent.now.isoformat(), "took_over": holder}
    if ledger.claim(INTENT_KIND, intent.key, taken, replacing=("token", holder)):
        return None
    again = ledger.get_item(INTENT_KIND, intent.key)
    if again is None or again.get("token") != intent.token:  # another late-comer took it over first
        return OnceResult(False, error=IN_FLIGHT, reused=True)
    return None


def send_command_once(
    ledger: Intents,
    commands: Any,
    *,
    event_id: str,
    instance_id: str,
    command: str,
    timeout_seconds: int,
    what: str = "checkpoint",
    document: str = DOCUMENT,
    clock: Callable[[], dt.datetime] | None = None,
) -> OnceResult:
    """Send ``command`` to ``instance_id`` at most once for this event, however often and however concurrently this
    is called."""
    key = intent_id(event_id, instance_id, document)
    comment = comment_for(key, what)
    token = uuid.uuid4().hex
    base = {"event_id": event_id, "instance_id": instance_id, "document": document, "comment": comment}
    intent = _Intent(key, instance_id, comment, base, token, (clock or _utcnow)())
    mine, found = _claim(ledger, intent)
    if not mine and found is not None:
        settled = _held(ledger, commands, intent, found)
        if settled is not None:
            return settled
    try:
        sent: Sent = commands.send(instance_id, command, timeout_seconds, comment=comment)
    except Exception as error:
        if _refused(error):  # SSM answered with an error, or the request never left: nothing was sent, free the claim
            released = {**base, "token": f"released:{token}", "claimed_at": EPOCH, "released": str(error)[:200]}
            ledger.claim(INTENT_KIND, key, released, replacing=("token", token))
        raise
    ledger.put_item(
        INTENT_KIND,
        key,
        {**base, "token": token, "command_id": sent.command_id, "delivered": sent.delivered, "error": sent.error},
    )
    return OnceResult(sent.delivered, sent.command_id, sent.error)


def first_claimant(ledger: Intents, scope: str, event_id: str, at: dt.datetime) -> str:
    """The event that owns ``scope`` (one interruption of one instance): this one when its conditional write lands
    first, or landed on an earlier attempt of this event; else the event that wrote it. Its later events are duplicates
    of that one, whatever their ids: two deliveries racing each other find the same owner."""
    if ledger.claim(OWNER_KIND, scope, {"event_id": event_id, "claimed_at": at.isoformat()}):
        return event_id
    found = ledger.get_item(OWNER_KIND, scope)
    return str(found.get("event_id") or event_id) if found else event_id


def held_elsewhere(
    ledger: Intents,
    event_id: str,
    instance_id: str,
    *,
    document: str = DOCUMENT,
    commands: Any = None,
    what: str = "checkpoint",
    clock: Callable[[], dt.datetime] | None = None,
) -> bool:
    """True when the command's intent was claimed less than :data:`TAKEOVER_AFTER` ago, holds neither a command id
    nor an error, and SSM lists no command with its Comment (``commands.find``; an earlier attempt whose send executed
    but whose answer was lost is found there, and :func:`send_command_once` reuses it): its holder may be sending it
    right now (what :func:`send_command_once` would answer ``IN_FLIGHT``). A caller that must not record "in flight"
    as an outcome (Spot) checks this first and lets Lambda retry it."""
    key = intent_id(event_id, instance_id, document)
    found = ledger.get_item(INTENT_KIND, key)
    if not found or found.get("command_id") or found.get("error") or found.get("released"):
        return False
    claimed = _claimed_at(found)
    if claimed is not None and (clock or _utcnow)() - claimed >= TAKEOVER_AFTER:
        return False
    finder = getattr(commands, "find", None)
    return not (callable(finder) and finder(instance_id, comment_for(key, what)))


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _refused(error: Exception) -> bool:
    """True when the send certainly did not reach SSM: an error answer (``ClientError`` carries ``response``), or a
    connection that failed before the request left. A read timeout is not: the command may have been sent."""
    response = getattr(error, "response", None)
    if isinstance(response, dict) and (response.get("Error") or {}).get("Code"):
        return True
    return type(error).__name__ in NOT_SENT_ERRORS


def _claimed_at(item: dict[str, Any]) -> dt.datetime | None:
    value = item.get("claimed_at") or item.get("at")
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
