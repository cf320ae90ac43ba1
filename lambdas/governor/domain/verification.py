"""What the governor saw when it re-read a resource after acting on it: the one ground for calling a problem resolved.

An enforced action that AWS accepted is not yet a fix: a key whose ``EnableKeyRotation`` was refused keeps rotation
off, a revoked rule may come back in the same minute, an instance asked to stop may still be running. The runner
re-reads the resource right after each fixing action (:mod:`governor.domain.rereads`) and the finding about the
problem carries the result (:attr:`governor.domain.decision.Finding.verified`); only ``fixed`` there lets a subscriber
(the Security Hub export) close the problem.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ConfigDict, Field

from governor.domain.model import Model

#: How much of what the re-read saw a finding carries (the sentences are the governor's own, plus AWS error text).
MAX_SEEN = 1000


class Verification(Model):
    """The resource as re-read after acting: ``fixed`` only when the problem the action was for is gone."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fixed: bool
    #: What was read, in words ("rotation enabled, every 90 days"; "enable_key_rotation failed: ...").
    seen: str = Field("", max_length=MAX_SEEN)


def seen(text: str) -> str:
    """``text`` within :data:`MAX_SEEN` characters."""
    return text if len(text) <= MAX_SEEN else text[: MAX_SEEN - 1] + "…"


def combined(checks: Iterable[tuple[str, bool, Any, str]]) -> Verification | None:
    """One decision's verification from its fixing actions' outcomes: ``(type, ok, verification, failure)`` each.

    None when no fixing action ran (nothing to verify). Fixed only when every fixing action succeeded and its re-read
    saw the fix; otherwise the first failure, or what the re-read saw instead of the fix, or that nothing was re-read.
    """
    said: list[str] = []
    ran = False
    for kind, ok, verification, failure in checks:
        ran = True
        if not ok:
            return Verification(fixed=False, seen=seen(f"{kind} failed: {failure}".rstrip(": ")))
        if not isinstance(verification, Verification):
            return Verification(fixed=False, seen=f"not re-read after {kind}: not verified")
        if not verification.fixed:
            return verification
        said.append(verification.seen)
    return Verification(fixed=True, seen=seen("; ".join(s for s in said if s))) if ran else None
