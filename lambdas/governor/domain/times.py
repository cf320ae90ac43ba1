"""Reading the times the governor stores and receives (tags, ledger items, credential reports): one lenient parser,
and the one range every time that comes from outside (events, trail files, metrics, flags, policy dates) must fit.

The range, 1970-01-01T00:00:00Z up to 2200-01-01T00:00:00Z, holds every real AWS timestamp with room to spare, and
keeps date arithmetic (a window before, a warning period after, a previous period) far from Python's year 1 and
year 9999, where it overflows.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(2200, 1, 1, tzinfo=dt.UTC)  # exclusive
RANGE_TEXT = "1970-01-01T00:00:00Z .. 2199-12-31T23:59:59Z"


class TimeRangeError(ValueError):
    """A time outside :data:`EARLIEST` .. :data:`LATEST`; the message names the value and the range."""


def utc(value: dt.datetime) -> dt.datetime:
    """The same moment in UTC; a naive time is taken as UTC (what AWS APIs and EventBridge write)."""
    return value.astimezone(dt.UTC) if value.tzinfo else value.replace(tzinfo=dt.UTC)


def as_utc(value: Any) -> dt.datetime | None:
    """:func:`utc` of a datetime (what boto3 returns for a time field); None for anything else (a missing field)."""
    return utc(value) if isinstance(value, dt.datetime) else None


def parse_time(value: Any) -> dt.datetime | None:
    """ISO 8601 (``Z`` accepted, spaces trimmed) or a datetime; naive times are UTC. None for anything else."""
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, str) and value.strip():
        try:
            parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def in_range(value: dt.datetime) -> bool:
    """Whether an aware or naive (UTC) time lies within the supported range."""
    aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    try:
        return EARLIEST <= aware < LATEST
    except OverflowError:  # an offset that pushes year 1 or 9999 past the edge
        return False


def bounded(value: dt.datetime, what: str = "time") -> dt.datetime:
    """``value`` (naive means UTC) if it lies in the supported range; else :class:`TimeRangeError` naming ``what``."""
    aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if not in_range(aware):
        raise TimeRangeError(f"{what} {value.isoformat()} is outside the supported range {RANGE_TEXT}")
    return aware


def parse_bounded(text: str, what: str = "time") -> dt.datetime:
    """A user-given ISO 8601 time or date (midnight UTC) within the supported range; errors name ``what``."""
    parsed = parse_time(text)
    if parsed is None:
        try:
            day = dt.date.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(f"{what} {text!r} is not an ISO 8601 time or date (e.g. 2026-11-01T00:00:00Z)") from None
        parsed = dt.datetime.combine(day, dt.time(), dt.UTC)
    return bounded(parsed, what)
