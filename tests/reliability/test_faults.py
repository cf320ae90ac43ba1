"""Fault injection: the harness makes AWS fail the way AWS fails, botocore's bounded retries absorb what they should,
and a small mixed run under faults keeps the invariants (the long run is ``bench/soak.py``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError
from moto import mock_aws

from governor.adapters.aws import RETRIES, client
from governor_cli.testing.deployment import Deployment
from governor_cli.testing.faults import FaultInjector
from governor_cli.testing.invariants import check, references, run_cases
from governor_cli.testing.scenarios import Scenarios, soak_policy

REGION = "us-east-1"
# botocore: max_attempts counts retries after the first call; once a client is built it stores total_max_attempts.
TOTAL_ATTEMPTS = RETRIES.retries.get("total_max_attempts") or RETRIES.retries["max_attempts"] + 1


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        client.cache_clear()
        yield
    client.cache_clear()


def test_retry_configuration_is_standard_and_bounded() -> None:
    assert RETRIES.retries["mode"] in ("standard", "adaptive")
    assert 2 <= TOTAL_ATTEMPTS <= 6
    assert RETRIES.connect_timeout and RETRIES.read_timeout


@pytest.mark.parametrize(
    ("service", "call", "code"),
    [
        ("ec2", lambda c: c.describe_instances(), "RequestLimitExceeded"),
        ("dynamodb", lambda c: c.list_tables(), "ThrottlingException"),
        ("iam", lambda c: c.list_users(), "Throttling"),
        ("s3", lambda c: c.list_buckets(), "SlowDown"),
        ("lambda", lambda c: c.list_functions(), "ThrottlingException"),
        ("cloudwatch", lambda c: c.list_metrics(), "ThrottlingException"),
    ],
)
def test_throttling_is_retried_with_bounded_attempts_in_every_wire_format(
    aws: None, service: str, call: Any, code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)  # a real back-off would land here
    with FaultInjector(1.0, ["throttling"]) as faults, faults.label("t"), pytest.raises(ClientError) as raised:
        call(client(service, REGION))
    assert raised.value.response["Error"]["Code"] == code
    assert (
        faults.attempts == TOTAL_ATTEMPTS
        and raised.value.response["ResponseMetadata"]["RetryAttempts"] == TOTAL_ATTEMPTS - 1
    )
    assert faults.virtual_seconds["t"] > 0 and not slept  # back-off counted on the virtual clock, never slept


def test_access_denied_is_not_retried(aws: None) -> None:
    with FaultInjector(1.0, ["access_denied"]) as faults, faults.label("t"), pytest.raises(ClientError) as raised:
        client("kms", REGION).list_keys()
    assert raised.value.response["Error"]["Code"] == "AccessDeniedException" and faults.attempts == 1


def test_a_transient_fault_is_absorbed_by_the_retry(aws: None) -> None:
    with FaultInjector(0.5, ["server_error", "connect_timeout"], seed=3) as faults, faults.label("t"):
        for _ in range(10):
            client("sqs", REGION).list_queues()
    assert sum(faults.injected.values()) >= 3
    assert all(call.ok for call in faults.calls)


def test_a_read_timeout_happens_after_the_service_executed(aws: None) -> None:
    """The nastiest fault: the change is made, the answer is lost, botocore sends it again."""
    with FaultInjector(1.0, ["read_timeout"]) as faults, faults.label("t"), pytest.raises(ReadTimeoutError):
        client("sqs", REGION).create_queue(QueueName="made-anyway")
    assert boto3.client("sqs", region_name=REGION).list_queues()["QueueUrls"][0].endswith("/made-anyway")
    (call,) = faults.calls
    assert call.executed == TOTAL_ATTEMPTS and call.error == "ReadTimeoutError"
    worst = TOTAL_ATTEMPTS * (RETRIES.connect_timeout + RETRIES.read_timeout)
    assert faults.virtual_seconds["t"] >= worst


def test_a_connect_timeout_never_reaches_the_service(aws: None) -> None:
    with FaultInjector(1.0, ["connect_timeout"]) as faults, faults.label("t"), pytest.raises(ConnectTimeoutError):
        client("sqs", REGION).create_queue(QueueName="never")
    assert "QueueUrls" not in boto3.client("sqs", region_name=REGION).list_queues()
    assert faults.calls[0].executed == 0


def test_unlabelled_calls_are_neither_faulted_nor_recorded(aws: None) -> None:
    with FaultInjector(1.0, ["access_denied"]) as faults:
        client("sqs", REGION).list_queues()
    assert faults.calls == [] and faults.attempts == 0


CASES = 24


def test_small_mixed_fault_run_keeps_the_invariants() -> None:
    """24 independent events (plus duplicates) under 10% mixed faults, each compared with a clean case of its kind."""
    with mock_aws(config={"lambda": {"use_docker": False}}):
        deployed = Deployment(soak_policy())
        try:
            scenarios = Scenarios(seed=5)
            with FaultInjector() as recorder:
                clean = references(run_cases(deployed, scenarios.one_of_each(), recorder))
            if not any(run.actions for run in clean.values()):
                pytest.skip("no event-driven handler has landed yet")
            cases = scenarios.make(CASES)
            with FaultInjector(0.10, seed=5) as injector:
                faulty = run_cases(deployed, cases, injector, duplicate_share=0.2, seed=5)
        finally:
            deployed.close()
    verdict = check("mixed", 0.10, clean, faulty, injector)
    assert sum(verdict.faults.values()) > 0
    assert verdict.lost == 0, verdict.problems
    assert verdict.outside_policy == 0, verdict.problems
    assert verdict.missed_actions == 0, verdict.problems
    assert verdict.handled + verdict.rejected + verdict.dlq == CASES
    if verdict.double_actions or verdict.ledger_mismatches:
        pytest.xfail("handlers that act twice or rewrite a decision after a retry:\n" + "\n".join(verdict.problems))
