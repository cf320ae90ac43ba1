"""The open sessions one organisation target's daily reconcile reads: its own, not the organisation's.

Every open-session item written in organisation mode carries ``target`` (``account#region`` of its instance), so a
target's reconcile reads its own partition of the ledger's sparse ``by-target`` index (``TargetLedger.query_own``)
and, by key, the items of its running instances that partition did not return. Reading every open session of the
organisation to keep a target's (800 targets x 40,000 sessions a day) is left to one reconcile per target: the first
after the stamp existed, which still finds items written without it; its refreshes and closes rewrite each of them
stamped, and a marker (kind :data:`STAMPED_KIND`, key the target) says so to every later reconcile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from governor.domain.fleet import Instance
from governor.domain.ports import target_key
from governor.lifecycle import domain
from governor.runtime import Runtime

#: The marker of a target whose open sessions all carry its stamp: its reconcile reads its partition only.
STAMPED_KIND = "open-session-stamped"


def stamp(item: Mapping[str, Any], home: tuple[str, str] | None) -> dict[str, Any]:
    """The item with ``target`` = its place (organisation mode; unchanged in a single account, where the reconcile
    reads every open session anyway and an index write would buy nothing)."""
    if home is None:
        return dict(item)
    return {**item, "target": target_key(*domain.placed_in(item, home))}


def _open(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(item) for item in items if item.get("open")]


def organisation_wide(
    runtime: Runtime, running: list[Instance], account: str, region: str, home: tuple[str, str] | None
) -> list[dict[str, Any]]:
    """Every open session of the ledger, then (organisation mode) the target's: its place's and its running
    instances'. What a single account reads, and what a target reads before its sessions carry its stamp."""
    items = _open(runtime.ledger.query_kind(domain.OPEN_SESSION))
    if home is None:
        return items
    return [dict(o) for o in domain.target_sessions(items, (i.id for i in running), account, region, home)]


def target_open_sessions(
    runtime: Runtime, running: list[Instance], account: str, region: str, home: tuple[str, str] | None
) -> tuple[list[dict[str, Any]], bool]:
    """The open sessions this reconcile may close or refresh, and whether they came from the whole organisation
    (the target's first reconcile with stamps: :func:`mark_stamped` once its writes are done).

    Its own stamped partition, plus by key the running instances it did not hold (an instance's place wins, as in
    :func:`domain.target_sessions`); the organisation's every open session only while the marker is absent.
    """
    own = getattr(runtime.ledger, "query_own", None)
    if home is None or own is None:
        return organisation_wide(runtime, running, account, region, home), False
    if runtime.ledger.get_item(STAMPED_KIND, target_key(account, region)) is None:
        return organisation_wide(runtime, running, account, region, home), True
    items = {str(o.get("instance_id")): o for o in _open(own(domain.OPEN_SESSION))}
    missing = [i.id for i in running if i.id not in items]
    if missing:
        items.update({k: v for k, v in runtime.ledger.get_many(domain.OPEN_SESSION, missing).items() if v.get("open")})
    return list(items.values()), False


def mark_stamped(runtime: Runtime, account: str, region: str) -> None:
    """After the first reconcile's writes: every open session placed here now carries its stamp."""
    runtime.ledger.put_item(STAMPED_KIND, target_key(account, region), {"account": account, "region": region})
