"""Audit activity: each CIS monitoring query's count against the period before, and who set the governor's own tags.

Audit rows count API calls worth a look; they are kept apart from the governor's findings (``sections.findings``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from governor.domain.times import parse_time
from governor.report.model import GOVERNOR_TAGS_COLUMNS, GOVERNOR_TAGS_TITLE, QuerySummary, Table, columns_of

#: Queries the cost section reads (GPU-hours from CloudTrail), not audit activity.
RESERVED_QUERIES = {"gpu_instance_hours"}


def security_section(
    current: Mapping[str, Mapping[str, Any]],
    previous: Mapping[str, Mapping[str, Any]] | None,
    top_rows: int,
    descriptions: Mapping[str, str] | None = None,
    errors: Mapping[str, str] | None = None,
) -> list[QuerySummary]:
    """Each query's count, its first ``top_rows`` rows and the change since the previous period, busiest first."""
    summaries = []
    names = (set(current) | set(errors or {})) - RESERVED_QUERIES
    for name in names:
        result = current.get(name, {})
        rows = list(result.get("rows", []))
        count = int(result.get("count", len(rows)))
        before = previous.get(name) if previous is not None else None
        summaries.append(
            QuerySummary(
                name=name,
                description=(descriptions or {}).get(name, ""),
                count=count,
                previous_count=int(before.get("count", len(before.get("rows", [])))) if before is not None else None,
                columns=columns_of(rows),
                top_rows=[_plain_row(r) for r in rows[:top_rows]],
                error=(errors or {}).get(name),
            )
        )
    return sorted(summaries, key=lambda q: (-q.count, q.name))


def _plain_row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, dt.datetime | dt.date) else v) for k, v in row.items()}


def governor_tags_table(items: Iterable[Mapping[str, Any]], start: dt.datetime, end: dt.datetime) -> Table:
    """Every exemption, snooze and checkpoint name set in the period, grouped by the person who set it (CloudTrail).

    Any account user can tag; this table is how the security team sees who keeps what out of the governor's reach.
    """
    rows = []
    for item in items:
        if item.get("kind") != "governor-tag":
            continue
        at = parse_time(item.get("at"))
        if at is None or not start <= at < end:
            continue
        rows.append(
            {
                "who": str(item.get("who") or "unknown"),
                "resource_id": str(item.get("resource_id") or ""),
                "key": str(item.get("key") or ""),
                "value": str(item.get("value") or ""),
                "at": at.isoformat(),
                "honoured": "no: " + str(item["problem"]) if item.get("problem") else "yes",
            }
        )
    rows.sort(key=lambda r: (r["who"], r["at"]))
    return Table(name="governor_tags", title=GOVERNOR_TAGS_TITLE, columns=list(GOVERNOR_TAGS_COLUMNS), rows=rows)
