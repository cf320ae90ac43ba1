"""The report's scenarios: one scheduled tick, one report archived and sent."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from governor_cli.testing.deployment import REPORTS_BUCKET
from governor_cli.testing.events import scheduled
from governor_cli.testing.scenarios import Case

if TYPE_CHECKING:
    from governor_cli.testing.scenarios import Scenarios

SOAK: dict[str, Any] = {"enforce": True}
#: The reliability deployment's archive bucket in its environment, as the stack gives it (infra/constructs/reports.py).
DEPLOYED_ENVIRONMENT = {"REPORTS_BUCKET": REPORTS_BUCKET}


def report_tick(scenarios: Scenarios, index: int) -> Case:
    # The report covers the UTC day before its event's time: the key follows that time, not a second reading
    # of the clock (which a run just before midnight would take on the other side of it)
    at = dt.datetime.now(dt.UTC).replace(microsecond=0)
    event = scheduled({"kind": "daily"}, time=at)
    start = (at - dt.timedelta(days=1)).date()
    return Case(f"daily report tick #{index}", "report", event, f"report:daily:{start:%Y-%m-%d}")


CASES = ((1, report_tick),)
