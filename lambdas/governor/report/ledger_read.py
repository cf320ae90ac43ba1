"""The report's ledger read: items compacted as the Query pages stream in, so two periods of decisions fit.

An idle sweep writes a decision per instance every sweep: a weekly report at 10,000 instances every 15 minutes reads
13.4 M of them. Kept as read, each is a fresh dict of fresh strings (about 4.3 KB in CPython). Most of it repeats:
the sweep's time and event id are the same for every instance of a sweep, the resource, rule, team, reasons and the
evidence's small parts (purchase, metric sources, reasons) the same sweep after sweep. Each item is rebuilt with one
shared object per distinct string and per distinct small flat list or dict, and without the keys the report never
reads (:data:`UNREAD`, an empty :data:`ABSENT_WHEN_EMPTY`): the same figures in a fraction of the memory
(``python -m bench.report_memory``). Nothing downstream mutates an item, which is what makes sharing safe.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import Any

#: Keys the report never reads: the table's own, and a decision's assumptions (``explain`` shows them).
UNREAD = frozenset({"pk", "sk", "expires_at", "assumptions"})
#: Keys the report reads as ``item.get(key) or []``: an empty one reads the same absent. A decision without them
#: has at most ten keys, which CPython holds in a dict of 272 bytes instead of 464.
ABSENT_WHEN_EMPTY = frozenset({"actions"})
#: Flat containers up to this many entries are shared when equal (evidence parts, reasons, actions); a bigger one
#: is rarely repeated and its key would cost as much as it saves.
SHARED_SIZE = 8


class Compactor:
    """One object per distinct string and per distinct small flat list or dict among the items it has seen."""

    def __init__(self) -> None:
        self._strings: dict[str, str] = {}
        self._shared: dict[tuple[Any, ...], Any] = {}

    def item(self, item: dict[str, Any]) -> dict[str, Any]:
        """The item without the keys the report never reads, its values shared with equal ones already seen."""
        return {
            self._string(k): self.value(v)
            for k, v in item.items()
            if k not in UNREAD and not (k in ABSENT_WHEN_EMPTY and not v)
        }

    def _string(self, value: str) -> str:
        return self._strings.setdefault(value, value)

    def value(self, value: Any) -> Any:
        """``value`` rebuilt with shared parts; equal-but-differently-typed scalars (1, 1.0, True) stay apart."""
        if isinstance(value, str):
            return self._string(value)
        if isinstance(value, list):
            items = [self.value(v) for v in value]
            return self._share(("list", *((type(v), v) for v in items)), items, len(items))
        if isinstance(value, dict):
            entries = {self._string(k): self.value(v) for k, v in value.items()}
            return self._share(("dict", *((k, type(v), v) for k, v in entries.items())), entries, len(entries))
        return value

    def _share(self, key: tuple[Any, ...], built: Any, size: int) -> Any:
        if size > SHARED_SIZE:
            return built
        try:
            return self._shared.setdefault(key, built)
        except TypeError:  # holds a list or dict: not flat, kept as built
            return built


def read_kind(ledger: Any, kind: str, since: dt.datetime | None, compactor: Compactor) -> Iterator[dict[str, Any]]:
    """The items of ``kind`` since ``since``, compacted one page at a time where the ledger streams
    (``DynamoLedger.iter_kind``), else from its list."""
    stream = getattr(ledger, "iter_kind", None)
    found: Iterable[dict[str, Any]] = stream(kind, since) if stream is not None else ledger.query_kind(kind, since)
    for item in found:
        yield compactor.item(item)
