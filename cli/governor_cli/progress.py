"""Progress on stderr for work that takes a while, shown only when stderr is a terminal.

tqdm (pinned in requirements.txt) rather than our own: it has no dependencies of its own (rich pulls in pygments and
markdown-it for features a bar does not need), draws nothing when its stream is not a TTY (``disable=None``), waits
``delay`` seconds before drawing (work under ~2 s prints nothing) and clears the bar when the work ends
(``leave=False``), so pipes, ``--json`` and CI logs stay exactly as they were.
"""

from __future__ import annotations

import sys
from typing import Any

#: Seconds of work before a bar appears (tests set 0; they never wait on the clock).
DELAY_SECONDS = 2.0


def bar(total: int | None, what: str, unit: str, quiet: bool = False, scale: bool = False) -> Any:
    """A tqdm bar on stderr; a no-op object when stderr is not a terminal or with ``--quiet``. ``scale``: counts
    shown with k, M, G (bytes read)."""
    from tqdm import tqdm

    return tqdm(
        total=total, desc=what, unit=unit, file=sys.stderr, delay=DELAY_SECONDS, disable=True if quiet else None,
        leave=False,
        dynamic_ncols=True,
        unit_scale=scale,
        unit_divisor=1024 if scale else 1000,
    )  # fmt: skip


def steps(what: str, quiet: bool = False) -> Any:
    """A bar for work whose size is known only once it starts (``run_audit``'s ``progress(step, total)``): the
    returned object is the callback, ``close()`` ends the bar. ``quiet`` (``--quiet``) draws nothing at all."""
    return _Steps(what, quiet)


class _Steps:
    def __init__(self, what: str, quiet: bool) -> None:
        self._what = what
        self._quiet = quiet
        self._bar: Any = None

    def __call__(self, step: str, total: int) -> None:
        if self._quiet:
            return
        if self._bar is None:
            self._bar = bar(total, self._what, "step")
        self._bar.set_postfix_str(step, refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
