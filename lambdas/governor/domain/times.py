"""Reading the times the governor stores and receives (tags, ledger items, credential reports): one lenient parser."""

from __future__ import annotations

import datetime as dt
from typing import Any


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
