"""The small interfaces the domain and handlers need from the outside world.

Adapters implement them against AWS; ``governor_cli.testing.memory`` implements them in memory for tests and benchmarks.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from governor.domain.decision import Decision, Finding
from governor.domain.items import Items

#: The account and region of the event being handled (organisation mode, issue 23): the runner sets it for each
#: event, and the ledger stamps it on every decision it records, so one ledger tells the organisation's accounts apart.
_EVENT_ORIGIN: ContextVar[Mapping[str, str] | None] = ContextVar("governor_event_origin", default=None)


def event_origin() -> Mapping[str, str]:
    """``{"account": ..., "region": ...}`` of the event being handled (each only when known), else empty."""
    return _EVENT_ORIGIN.get() or {}


def target_key(account: str, region: str) -> str:
    """An organisation target's key (``account#region``): the ``target`` stamp of the items its sweeps own (the
    ledger's ``by-target`` index), whoever writes them."""
    return f"{account}#{region}"


@contextmanager
def handling_event_from(account: object, region: object) -> Iterator[None]:
    """While handling one event: the account and region it happened in (non-strings are ignored)."""
    origin = {k: v for k, v in (("account", account), ("region", region)) if isinstance(v, str) and v}
    token = _EVENT_ORIGIN.set(origin)
    try:
        yield
    finally:
        _EVENT_ORIGIN.reset(token)


_PARKED: ContextVar[list[str] | None] = ContextVar("governor_parked", default=None)


def note_parked(reason: str) -> None:
    """A dead-letter queue took this invocation's event (or part of its work) to be replayed later; the runner's
    idempotency must then not remember the invocation as done, or ``governor dlq replay`` would get the stored result
    instead of a delivery. Every ``DeadLetters`` implementation calls this."""
    parked = _PARKED.get()
    if parked is not None:
        parked.append(reason)


@contextmanager
def watching_parks() -> Iterator[list[str]]:
    """Collect what :func:`note_parked` reports while the body runs."""
    parked: list[str] = []
    token = _PARKED.set(parked)
    try:
        yield parked
    finally:
        _PARKED.reset(token)


class Ledger(Items, Protocol):
    """Every decision, including "no action" and dry runs, with its reason and evidence; and the items by kind and key
    the runtime keeps beside them (:class:`governor.domain.items.Items`)."""

    def record(self, decision: Decision, *, event_id: str, at: dt.datetime | None = None, held: bool = False) -> str:
        """Record ``decision`` under (resource, policy, event). A later "no action" entry never erases an "act" entry
        of the same key (a retry that finds the resource already fixed), unless ``held``: the runner's re-read held
        the action back and no outcome of it was recorded, so the "act" entry would claim something never done."""
        ...

    def record_many(self, decisions: Sequence[Decision], *, event_id: str, at: dt.datetime | None = None) -> list[str]:
        """A sweep's decisions in as few requests as the store allows, with ``record``'s guarantees."""
        ...


class PublishError(RuntimeError):
    """Some findings were not accepted (EventBridge answered with failed entries, or the call failed).

    ``accepted`` holds the ids of the findings that were accepted anyway, so the outbox marks only those as sent.
    """

    def __init__(self, message: str, accepted: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.accepted = list(accepted)


class FindingSink(Protocol):
    """Where findings go: the ``governor`` EventBridge bus in the cloud, a list in tests.

    ``publish`` returns normally only when every finding was accepted; otherwise it raises :class:`PublishError`.
    """

    def publish(self, findings: list[Finding]) -> None: ...


class DeadLetters(Protocol):
    """Where an event that cannot be processed goes, with its reason, so nothing is lost."""

    def send(self, event: Any, reason: str) -> None: ...


class ReadRefused(Exception):
    """AWS refused to let the governor read a resource (AccessDenied): one resource is ungoverned, not the run."""

    def __init__(self, resource: str, code: str, message: str = "") -> None:
        super().__init__(f"{resource}: {code} {message}".strip())
        self.resource = resource
        self.code = code
        self.message = message


class Clock(Protocol):
    def now(self) -> dt.datetime: ...


def utcnow() -> dt.datetime:
    """The system clock in UTC: what every injectable clock (handlers, the outbox) falls back to outside tests."""
    return dt.datetime.now(dt.UTC)
