"""At least once in, exactly once out: every kind of event delivered twice, and concurrently, acts once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError
from moto import mock_aws

from governor import runner
from governor_cli.demo.bootstrap import create_shared
from governor_cli.testing.deployment import Deployment, LambdaContext
from governor_cli.testing.faults import FaultInjector
from governor_cli.testing.invariants import is_action, target_of
from governor_cli.testing.scenarios import Case, Scenarios

REGION = "us-east-1"


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with mock_aws():
        local = create_shared(REGION)
        monkeypatch.setenv("IDEMPOTENCY_TABLE", local.idempotency_table)
        yield local.idempotency_table


def once(func: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """``func`` through the one way into idempotency, as the handler skeleton calls it (``governor.runtime.Handler``):
    keyed on the function's name and the event id, the Lambda context registered when given."""
    name = f"{func.__module__}.{func.__qualname__}"

    def run(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
        return runner.once_per_event(event=event, name=name, work=lambda: func(event), context=context)

    return run


def _counting() -> tuple[Counter[str], Any]:
    runs: Counter[str] = Counter()

    @once
    def work(event: dict[str, Any]) -> dict[str, Any]:
        runs[event["id"]] += 1
        time.sleep(0.05)  # long enough for concurrent duplicates to overlap (not a wait for a result)
        return {"status": "done", "id": event["id"]}

    return runs, work


def test_duplicate_returns_the_first_result_and_runs_once(table: str) -> None:
    runs, work = _counting()
    first = work({"id": "e-1", "detail": {}}, None)
    again = work(event={"id": "e-1", "detail": {"changed": True}})
    assert first == again == {"status": "done", "id": "e-1"}
    assert runs == Counter({"e-1": 1})
    work({"id": "e-2"})
    assert runs == Counter({"e-1": 1, "e-2": 1})


def test_record_lives_in_the_stacks_table_with_a_ttl(table: str) -> None:
    _, work = _counting()
    before = time.time()
    work({"id": "e-ttl"}, LambdaContext("spot", remaining_ms=30_000))
    (item,) = boto3.client("dynamodb", region_name=REGION).scan(TableName=table)["Items"]
    assert item["status"]["S"] == "COMPLETED"
    assert 23 * 3600 < int(item["expiration"]["N"]) - before <= 24 * 3600 + 5
    assert "test_idempotency" in item["id"]["S"]  # keyed per handler function, then the event id's hash


def test_concurrent_duplicates_run_once_and_the_others_retry_to_the_same_result(table: str) -> None:
    runs, work = _counting()
    outcomes: list[Any] = []
    lock = threading.Lock()

    def deliver() -> None:
        try:
            result: Any = work({"id": "e-race"})
        except IdempotencyAlreadyInProgressError as error:
            result = error
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=deliver) for _ in range(6)]
    with FaultInjector():  # DynamoDB's conditional write is atomic; the injector makes the emulator's so too
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert runs == Counter({"e-race": 1})
    assert sum(isinstance(o, dict) for o in outcomes) >= 1
    for outcome in outcomes:  # Lambda retries an invocation that raised: the retry gets the stored result
        if isinstance(outcome, IdempotencyAlreadyInProgressError):
            assert work({"id": "e-race"}) == {"status": "done", "id": "e-race"}
    assert runs == Counter({"e-race": 1})


def test_a_failed_run_is_not_remembered(table: str) -> None:
    attempts: Counter[str] = Counter()

    @once
    def flaky(event: dict[str, Any]) -> dict[str, Any]:
        attempts[event["id"]] += 1
        if attempts[event["id"]] == 1:
            raise RuntimeError("throttled")
        return {"ok": True}

    with pytest.raises(RuntimeError):
        flaky({"id": "e-flaky"})
    assert flaky({"id": "e-flaky"}) == {"ok": True}
    assert flaky({"id": "e-flaky"}) == {"ok": True}
    assert attempts["e-flaky"] == 2


def test_without_a_table_the_function_runs_unwrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    runs, work = _counting()
    work({"id": "e-1"})
    work({"id": "e-1"})
    assert runs["e-1"] == 2


def _kinds(deployment: Deployment) -> list[Case]:
    """One case of every kind the present handlers accept (builders are discovered per capability)."""
    scenarios = Scenarios(seed=1)
    # Asynchronous deliveries only: Slack's POST to the Function URL is answered once, never redelivered by AWS.
    kinds = [builder(index) for index, (_, builder) in enumerate(scenarios.builders)]
    kinds = [case for case in kinds if not case.sync]
    if not kinds:
        pytest.skip("no event-driven handler has landed yet")
    return kinds


def _actions(injector: FaultInjector, label: str) -> Counter[tuple[str, str]]:
    return Counter(
        (call.operation, target_of(call.params))
        for call in injector.calls
        if call.label and call.label.startswith(label) and is_action(call)
    )


def test_every_kind_of_event_delivered_twice_acts_once(deployment: Deployment) -> None:
    with FaultInjector() as recorder:
        for case in _kinds(deployment):
            first = deployment.deliver(case.function, case.event, injector=recorder, label=f"{case.name}/1")
            second = deployment.deliver(case.function, case.event, injector=recorder, label=f"{case.name}/2")
            assert first.status == second.status == "handled", (case.name, first, second)
            assert second.result == first.result, case.name
            assert not _actions(recorder, f"{case.name}/2"), f"{case.name}: the duplicate acted again"
            acted = _actions(recorder, f"{case.name}/1")
            assert all(n == 1 for n in acted.values()), f"{case.name}: {acted}"
            assert bool(acted) is not case.forbidden, f"{case.name}: {acted}"


def test_every_kind_of_event_delivered_concurrently_acts_once(deployment: Deployment) -> None:
    with FaultInjector() as recorder:
        for case in _kinds(deployment):
            deployment.activate(case.function)
            outcomes: list[Any] = []

            def invoke(number: int, case: Case = case, outcomes: list[Any] = outcomes) -> None:
                with recorder.label(f"{case.name}/{number}"):
                    try:
                        outcomes.append(deployment.invoke(case.function, case.event))
                    except IdempotencyAlreadyInProgressError as error:
                        outcomes.append(error)

            threads = [threading.Thread(target=invoke, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert len(outcomes) == 4, case.name  # no other exception escaped a handler
            busy = [o for o in outcomes if isinstance(o, IdempotencyAlreadyInProgressError)]
            done = [o for o in outcomes if isinstance(o, dict)]
            assert done and len(done) + len(busy) == 4, (case.name, outcomes)
            for number in range(len(busy)):  # Lambda retries those a minute later: they get the stored result
                retry = deployment.deliver(case.function, case.event, injector=recorder, label=f"{case.name}/r{number}")
                assert retry.status == "handled" and retry.result == done[0], case.name
            acted = _actions(recorder, case.name)
            assert all(n == 1 for n in acted.values()), f"{case.name}: acted {acted}"
            assert bool(acted) is not case.forbidden, f"{case.name}: {acted}"
