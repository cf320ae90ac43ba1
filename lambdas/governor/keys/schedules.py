"""Secrets Manager rotation schedules read as days: how long a schedule may leave a secret unrotated, and the rules
that bring it to the policy. Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_RATE = re.compile(r"^\s*rate\(\s*(\d+)\s+(day|days|hour|hours)\s*\)\s*$", re.IGNORECASE)
_CRON = re.compile(r"^\s*cron\((.+)\)\s*$", re.IGNORECASE)


def _field(rules: Mapping[str, Any], name: str) -> Any:
    """Rotation rules arrive as ``AutomaticallyAfterDays`` from the API and ``automaticallyAfterDays`` in CloudTrail."""
    for key, value in rules.items():
        if key.lower() == name.lower():
            return value
    return None


def _month_gap(months: str) -> int | None:
    if months in ("*", "?"):
        return 1
    step = re.fullmatch(r"(\*|\d+)/(\d+)", months)
    if step:
        return int(step.group(2))
    chosen: set[int] = set()
    for part in months.split(","):
        span = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not span:
            return None
        low, high = int(span.group(1)), int(span.group(2) or span.group(1))
        chosen.update(range(low, high + 1))
    ordered = sorted(m for m in chosen if 1 <= m <= 12)
    if not ordered:
        return None
    gaps = [(ordered[(i + 1) % len(ordered)] - m) % 12 or 12 for i, m in enumerate(ordered)]
    return max(gaps)


def rotation_interval_days(rules: Mapping[str, Any]) -> int | None:
    """The longest time between two rotations a schedule allows, in days (an upper bound for cron schedules).

    ``AutomaticallyAfterDays: N`` and ``rate(N days)`` are exact; a cron schedule is bounded by its day/month
    fields (daily 1, weekly 7, monthly 31, every third month 93). None when the schedule cannot be read.
    """
    days = _field(rules, "AutomaticallyAfterDays")
    expression = _field(rules, "ScheduleExpression")
    if expression:
        rate = _RATE.match(str(expression))
        if rate:
            amount = int(rate.group(1))
            return amount if rate.group(2).lower().startswith("day") else max(1, math.ceil(amount / 24))
        cron = _CRON.match(str(expression))
        if not cron:
            return None
        parts = cron.group(1).split()
        if len(parts) != 6:
            return None
        _minutes, _hours, day_of_month, month, day_of_week, _year = parts
        gap = _month_gap(month)
        if gap is None:
            return None
        if day_of_month in ("*", "?") and day_of_week in ("*", "?"):
            return 1 if gap == 1 else 31 * gap
        if day_of_month in ("*", "?") and not any(c in day_of_week for c in "#L"):
            return 7 if gap == 1 else 31 * gap
        return 31 * gap
    if isinstance(days, int | float) and days > 0:
        return int(days)
    return None


def policy_rules(secret_rules: Mapping[str, Any], days: int) -> dict[str, Any]:
    """The rotation rules that bring a schedule to the policy, keeping the secret's style and window."""
    rules: dict[str, Any]
    if _field(secret_rules, "ScheduleExpression"):
        rules = {"ScheduleExpression": f"rate({days} days)"}
    else:
        rules = {"AutomaticallyAfterDays": days}
    duration = _field(secret_rules, "Duration")
    if duration:
        rules["Duration"] = duration
    return rules
