"""The soak's and the fault scenarios' clocked idle adapters stand in for ``governor.idle.handler._aws``: a parameter
the handler passes and they do not take fails every clocked sweep (the events parked, counted as lost), which the
soak then reports as a reliability problem of the handler. Their signatures must stay the same."""

from __future__ import annotations

import datetime as dt
import inspect

import governor.idle.handler as idle_handler
from governor_cli.testing.idle_clock import clocked_idle


def test_the_clocked_adapters_take_every_parameter_the_handler_passes() -> None:
    deployed = inspect.signature(idle_handler._aws).parameters
    with clocked_idle(dt.datetime(2026, 12, 1, tzinfo=dt.UTC)):
        clocked = inspect.signature(idle_handler._aws.__wrapped__).parameters  # type: ignore[attr-defined]
    assert list(clocked) == list(deployed)
