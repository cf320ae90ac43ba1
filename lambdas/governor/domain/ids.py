"""Deterministic ids: the same inputs give the same id on a retry and in any other process.

Findings (``governor.outbox``), at-most-once intents (``governor.domain.once``), client tokens (RotateSecret) and the
organisation fan-out's messages are named this way, so a resent call or a replayed event is recognised as the same.
"""

from __future__ import annotations

import uuid

#: Fixed namespace for uuid5 ids: the same (event, resource, rule) gives the same id in every run.
NAMESPACE = uuid.UUID("6f1d3c1e-9a4b-5b7e-8d2a-1f0c6e4b2a90")


def deterministic_id(*parts: str) -> str:
    """A uuid5 of the parts: the same inputs give the same id, on a retry and in any other process."""
    return str(uuid.uuid5(NAMESPACE, "|".join(parts)))
