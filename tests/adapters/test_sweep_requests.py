"""The idle sweep's DynamoDB requests do not grow one by one with its warnings (issue 35, item 2): marks, the tags'
outcome records and the outbox entries go in batches; what is left as single requests is per sweep, not per warning.
The same measurement as ``bench.sweep_dynamodb`` (the real ``run_sweep`` and ``DynamoLedger`` on moto), on a small
fleet."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from governor.adapters.aws import client


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    client.cache_clear()
    yield
    client.cache_clear()


def test_single_item_requests_are_per_sweep_not_per_warning() -> None:
    from bench.sweep_dynamodb import measure

    small, large = measure(100, 0.1), measure(300, 0.1)
    assert small["warned"] >= 9 and large["warned"] >= 27  # the breaker may hold a few back
    for kind in ("idle-mark", "action", "outbox", "decision"):
        assert not any(name.endswith(f" {kind}") and n >= small["warned"] for name, n in small["by_item"].items())
    singles = {op: n for op, n in large["by_operation"].items() if op in ("PutItem", "GetItem")}
    assert singles == {op: n for op, n in small["by_operation"].items() if op in ("PutItem", "GetItem")}
    # Each further warning costs a share of batched requests (its 6 items over 25 a request, plus the decisions of ten
    # instances): under one request; it was 7.5 before the batching.
    assert large["requests"] - small["requests"] < large["warned"] - small["warned"]
