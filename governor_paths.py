"""Put ``lambdas/`` on ``sys.path`` so ``app.py`` imports the runtime package's policy model without installing it."""

from __future__ import annotations

import sys
from pathlib import Path


def ensure_paths() -> None:
    root = Path(__file__).resolve().parent
    for path in (root, root / "lambdas"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
