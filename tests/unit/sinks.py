"""Finding sinks the handler tests share."""

from __future__ import annotations

from typing import Any

from governor_cli.testing.memory import MemorySink


class RefusesFirstBatch(MemorySink):
    """The findings bus refuses the first batch with ``error`` (a PutEvents FailedEntryCount, or a throttle that
    outlasted botocore's retries), then accepts."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.refused = 0

    def publish(self, findings: list[Any]) -> None:
        if not self.refused:
            self.refused += 1
            raise self.error
        super().publish(findings)
