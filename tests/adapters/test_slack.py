"""The Slack webhook against a real HTTP server on 127.0.0.1: 429 with Retry-After, retries, no URL in errors or logs."""

from __future__ import annotations

import datetime as dt
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.slack import (
    DeliveryError,
    SecretMissingError,
    SlackWebhook,
    webhook_url_from_secret,
)
from governor.notifier.handler import AwsOutbox, handle
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink


class FakeSlack:
    """Answers with a scripted list of (status, headers, body); then 200 ok. Records every request body."""

    def __init__(self, script: list[tuple[int, dict[str, str], str]]) -> None:
        self.script = list(script)
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                outer.bodies.append(json.loads(self.rfile.read(length)))
                status, headers, body = outer.script.pop(0) if outer.script else (200, {}, "ok")
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/SECRETTOKEN"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    server = FakeSlack([])
    yield server
    server.close()


def test_429_waits_for_retry_after_then_delivers(slack: FakeSlack) -> None:
    slack.script = [(429, {"Retry-After": "7"}, "rate_limited"), (429, {"Retry-After": "2"}, "rate_limited")]
    waits: list[float] = []
    SlackWebhook(slack.url, sleep=waits.append).post({"text": "hello", "blocks": []})
    assert waits == [7.0, 2.0]
    assert len(slack.bodies) == 3 and slack.bodies[-1]["text"] == "hello"


def test_a_huge_retry_after_is_capped(slack: FakeSlack) -> None:
    slack.script = [(429, {"Retry-After": "3600"}, "rate_limited")]
    waits: list[float] = []
    SlackWebhook(slack.url, sleep=waits.append, max_wait_seconds=30).post({"text": "x"})
    assert waits == [30.0]


def test_server_errors_are_retried_a_bounded_number_of_times_then_raise_without_the_url(slack: FakeSlack) -> None:
    slack.script = [(503, {}, "unavailable")] * 10
    waits: list[float] = []
    with pytest.raises(DeliveryError) as raised:
        SlackWebhook(slack.url, sleep=waits.append, max_attempts=4).post({"text": "x"})
    assert len(slack.bodies) == 4 and waits == [1.0, 2.0, 4.0]
    assert "HTTP 503" in str(raised.value)
    assert "SECRETTOKEN" not in str(raised.value) and "127.0.0.1" not in str(raised.value)


def test_a_rejected_payload_is_not_retried(slack: FakeSlack) -> None:
    slack.script = [(400, {}, "invalid_blocks")]
    with pytest.raises(DeliveryError, match="invalid_blocks"):
        SlackWebhook(slack.url, sleep=lambda _: None).post({"text": "x"})
    assert len(slack.bodies) == 1


def test_an_unreachable_webhook_fails_clearly_after_retries() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/services/SECRETTOKEN"
    with pytest.raises(DeliveryError, match="unreachable") as raised:
        SlackWebhook(url, sleep=lambda _: None, max_attempts=2, timeout_seconds=1).post({"text": "x"})
    assert "SECRETTOKEN" not in str(raised.value)


def test_the_transport_is_slack_sdks_and_it_logs_nothing_about_the_url(
    slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    from slack_sdk.webhook import WebhookClient

    slack.script = [(503, {}, "unavailable")] * 10
    webhook = SlackWebhook(slack.url, sleep=lambda _: None, max_attempts=2)
    assert isinstance(webhook._client, WebhookClient)  # slack_sdk's client and retry loop, our retry policy
    with caplog.at_level("DEBUG"), pytest.raises(DeliveryError):
        webhook.post({"text": "x"})
    assert len(slack.bodies) == 2 and "SECRETTOKEN" not in caplog.text


def test_plain_http_is_refused_except_for_a_local_test_server() -> None:
    with pytest.raises(SecretMissingError):
        SlackWebhook("http://hooks.slack.com/services/x")


@mock_aws
def test_webhook_url_from_secret_plain_json_and_missing() -> None:
    secrets = boto3.client("secretsmanager", region_name="us-east-1")
    secrets.create_secret(Name="governor/slack-webhook", SecretString="https://hooks.slack.com/services/T/B/X")
    secrets.create_secret(Name="team/slack", SecretString=json.dumps({"url": "https://hooks.slack.com/services/1"}))
    secrets.create_secret(Name="bad/slack", SecretString="ftp://hooks.slack.com/services/T/B/X")
    assert webhook_url_from_secret("governor/slack-webhook", "us-east-1").endswith("/T/B/X")
    assert webhook_url_from_secret("team/slack", "us-east-1").endswith("/services/1")
    with pytest.raises(SecretMissingError, match="does not hold an https:// URL"):
        webhook_url_from_secret("bad/slack", "us-east-1")
    with pytest.raises(SecretMissingError, match="'nope/slack' not found in Secrets Manager"):
        webhook_url_from_secret("nope/slack", "us-east-1")


def _finding_event() -> dict[str, Any]:
    now = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.UTC).isoformat()
    body = {
        "policy": "idle",
        "rule": "idle.warned",
        "severity": "warning",
        "resource": "i-0abc",
        "title": "Idle GPU instance i-0abc will be stopped",
        "at": now,
    }
    return events.finding(body, event_id="evt-1", time=now)


@mock_aws
def test_notifier_end_to_end_reads_the_secret_posts_and_never_logs_the_url(
    slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    boto3.client("secretsmanager", region_name="us-east-1").create_secret(
        Name="governor/slack-webhook", SecretString=slack.url
    )
    slack.script = [(429, {"Retry-After": "1"}, "rate_limited")]
    policy = parse_policy({"notifications": {"enforce": True, "immediate": "actionable"}})
    rt = Runtime(policy=policy, ledger=MemoryLedger(), sink=MemorySink(), dead_letters=MemoryDeadLetters())
    outbox = AwsOutbox("us-east-1", None, sleep=lambda _: None)
    result = handle(_finding_event(), rt, outbox)
    assert result["status"] == "sent"
    assert slack.bodies[-1]["blocks"][0]["type"] == "header"
    logged = capsys.readouterr()
    assert "SECRETTOKEN" not in logged.out + logged.err


@mock_aws
def test_notifier_with_a_missing_secret_reports_it_and_keeps_the_finding() -> None:
    policy = parse_policy({"notifications": {"enforce": True, "immediate": "actionable"}})
    rt = Runtime(policy=policy, ledger=MemoryLedger(), sink=MemorySink(), dead_letters=MemoryDeadLetters())
    result = handle(_finding_event(), rt, AwsOutbox("us-east-1", None))
    assert result["status"] == "undeliverable"
    assert "governor/slack-webhook' not found" in rt.dead_letters.messages[0][1]  # type: ignore[attr-defined]
