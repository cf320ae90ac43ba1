"""The ledger as a store of items by kind and key: what the at-most-once protocol (``governor.domain.once``) and the
runtime's own records need of it, apart from recording decisions (``governor.domain.ports.Ledger``, which is one).

Kept apart from the decision ports so the protocol that sends a command once, which the typed actions use, names no
decision type (the decisions hold the typed actions)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Protocol


class Items(Protocol):
    """Items by kind and key, written unconditionally or claimed with a conditional write."""

    def put_item(self, kind: str, key: str, item: dict[str, Any]) -> None: ...

    def put_many(self, items: Iterable[tuple[str, str, dict[str, Any]]]) -> None:
        """``put_item`` of each (kind, key, item), unconditional, in as few requests as the store allows; the same key
        twice keeps the last. Not atomic as a whole: a failure may leave some written, as single puts would."""
        ...

    def get_item(self, kind: str, key: str) -> dict[str, Any] | None: ...

    def get_many(self, kind: str, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``get_item`` of many keys of one kind, strongly consistent: key -> item, keys with no item left out."""
        ...

    def query_kind(self, kind: str, since: dt.datetime | None = None) -> list[dict[str, Any]]: ...

    def claim(self, kind: str, key: str, item: dict[str, Any], *, replacing: tuple[str, Any] | None = None) -> bool:
        """Write ``item`` only if no item has this key (a conditional write); False when one already exists.

        With ``replacing=(field, value)`` the write succeeds only if the item exists and its ``field`` still holds
        ``value`` (compare-and-set: a takeover of a stale claim, a breaker state read at version N); with ``value``
        None, only if the item exists without ``field``."""
        ...
