"""The re-read after a fixing action: did the problem go away? Each action type answers for itself
(``Action.verify``, beside its ``execute`` in the package of the capability that takes it), on the same adapter bundle
it executed through (the reads each capability already holds: DescribeInstances, DescribeSecurityGroups and
DescribeSecurityGroupRules, GetKeyRotationStatus, ListAccessKeys, DescribeSecret), so no grant is added.

The runner calls :func:`after` for every enforced action AWS accepted and keeps the answer on the action's outcome
(:attr:`governor.domain.actions.Outcome.verified`); the decision's findings then carry the combined answer
(:func:`governor.domain.verification.combined`). A type with no check (a checkpoint, a Spot replacement) is never
called fixed; a re-read that fails says so and is not a fix either.
"""

from __future__ import annotations

from typing import Any

from governor.domain.actions import Acting, Action
from governor.domain.verification import Verification, seen


def after(action: Action, aws: Any, at: Acting) -> Verification | None:
    """The resource re-read after ``action``: None for an action type that fixes nothing by itself or has no check;
    a failed read is reported as not verified (the action itself stands)."""
    try:
        return action.verify(aws, at)
    except Exception as error:  # a refused or failed read: the fix is not seen, so it is not claimed
        return Verification(fixed=False, seen=seen(f"re-read after {action.type} failed: {error}"))
