"""A time bound for one test case: a hang becomes a failure naming the case instead of a stuck CI job."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class CaseTimedOut(AssertionError):
    """The case ran past its bound: the command under test would have hung."""


@contextlib.contextmanager
def time_bound(seconds: float, name: str = "case") -> Iterator[None]:
    """Raise :class:`CaseTimedOut` in the running code after ``seconds`` (a SIGALRM timer; main thread only).

    Outside the main thread (no signals there) the code runs unbounded, which only loses the guard, not the test.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise CaseTimedOut(f"{name}: still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
