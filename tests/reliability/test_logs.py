"""Nothing secret in what the handlers log: every kind of event, a rejected one and a failing one, scanned."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from governor.observability import logger
from governor_cli.testing.deployment import Deployment
from governor_cli.testing.faults import FaultInjector
from governor_cli.testing.scenarios import Scenarios
from governor_cli.testing.secrets import find_secrets

WEBHOOK = "https://hooks.slack.com/services/T0GOVERNOR/B0GOVERNOR/abcdefghijklmnopqrstuvwx"


def test_scanner_recognises_what_must_never_be_logged() -> None:
    planted = f"key AKIAIOSFODNN7EXAMPLE hook {WEBHOOK} -----BEGIN RSA PRIVATE KEY----- xoxb-123456789012-abcdefghij"
    assert {hit.kind for hit in find_secrets(planted)} == {
        "AWS access key id",
        "Slack webhook URL",
        "private key",
        "Slack token",
    }
    assert all("abcdefghijklmnop" not in hit.excerpt for hit in find_secrets(WEBHOOK))  # excerpts are masked


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """Everything the handlers' Powertools logger writes, as the JSON lines CloudWatch Logs would receive."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logger.registered_formatter)
    target = logging.getLogger(logger.name)
    target.addHandler(handler)
    yield stream
    target.removeHandler(handler)


def test_handler_logs_hold_no_secret(deployment: Deployment, logs: io.StringIO) -> None:
    scenarios = Scenarios(seed=9)
    cases = [*scenarios.one_of_each(), scenarios.invalid(0)]
    if not scenarios.builders:
        pytest.skip("no event-driven handler has landed yet")
    with FaultInjector() as recorder:
        for case in cases:
            deployment.deliver(case.function, case.event, injector=recorder, label=case.name)
    with FaultInjector(1.0, ["access_denied"]) as failing:
        case = scenarios.one_of_each()[0]
        deployment.deliver(case.function, case.event, injector=failing, label="failing")
    text = logs.getvalue()
    assert '"level"' in text and "rejected" in text, "the handlers logged nothing: the scan would prove nothing"
    assert not find_secrets(text), find_secrets(text)
