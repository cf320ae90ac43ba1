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


def bar(total: int | None, what: str, unit: str) -> Any:
    """A tqdm bar on stderr; a no-op object when stderr is not a terminal."""
    from tqdm import tqdm

    return tqdm(
        total=total, desc=what, unit=unit, file=sys.stderr, delay=DELAY_SECONDS, disable=None, leave=False,
        dynamic_ncols=True,
    )  # fmt: skip
