"""The report's own decisions: which period a scheduled run covers, and the period it is compared with.

The report itself is built in layers (docs/architecture.md): ``model`` (what a report says), ``sections`` (each
section computed from audit results and ledger items), ``build`` (assembly, trends, a team's digest) and ``render``
(formatting, CSV, HTML, Slack and text). This module imports none of them, so ``governor explain``, which imports
each capability's ``domain``, loads nothing of the report.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from governor.report.model import ReportKind


def period_for(kind: ReportKind, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """Daily: the previous whole UTC day. Weekly: the seven whole days before today (a Monday run covers Mon-Sun)."""
    today = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days = 7 if kind == "weekly" else 1
    return today - dt.timedelta(days=days), today


def previous_period(start: dt.datetime, end: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The period of the same length just before: what the audit counts are compared with."""
    return start - (end - start), start
