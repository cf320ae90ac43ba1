"""Issue 33's attacks on the Slack path, through the real endpoint, its worker and the idle function on moto.

Each failed on the main branch of the time: a direct Invoke of the idle function made it POST to an internal URL and
wrote a made-up ``requested_by`` into the ledger; a missing signing secret was re-read on every request; a signed body
with more than 20 fields raised (HTTP 500); an expired button still acted; a bare owner tag matched two people.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import boto3
import pytest
from moto import mock_aws

from governor.adapters.slack_app import SlackSecrets
from governor.idle import handler as idle_handler
from governor.interactions import handler as interactions
from governor.interactions.domain import BUTTON_KIND, KEEP_HOURS, STOP_NOW, ClickError, check_response_url
from governor_cli.testing.memory import MemoryLedger
from tests.adapters.test_interactions import (
    NOW,
    OWNER,
    Context,
    World,
    _body,
    _finding,
    _issue,
    _launch,
    _metrics,
    _policy,
    _request,
    _runtime,
    _sign,
    _state,
    _warned,
)


@pytest.fixture
def world() -> Any:
    with mock_aws():
        yield World(_policy())


def _stop_request(instance: str, response_url: str, requested_by: str) -> dict[str, Any]:
    """What a principal allowed to invoke the idle function could send it directly, bypassing Slack."""
    return {
        "version": "0",
        "id": "slack:governor_stop_now:" + "a" * 32 + ":UANA:1",
        "detail-type": "Stop Requested",
        "source": "gpu-fleet-governor.interactions",
        "account": "123456789012",
        "time": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [],
        "detail": {
            "instance_id": instance,
            "requested_by": requested_by,
            "slack_user": "UANA",
            "response_url": response_url,
            "token": "a" * 32,
            "message_blocks": [],
        },
    }


@pytest.mark.parametrize(
    "url",
    ["http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:9001/2018-06-01/runtime/invocation/next"],
    ids=["metadata", "lambda-runtime-api"],
)
def test_a_direct_stop_now_invoke_posts_nowhere_stops_nothing_and_records_no_made_up_requester(
    world: World, url: str
) -> None:
    instance = _launch(world.ec2)
    _metrics(instance, 0.2)
    _warned(world.runtime, instance)
    result = idle_handler.handle(_stop_request(instance, url, "ceo@example.com"), world.runtime, world.idle)
    assert result["status"] == "refused" and world.slack.posted == []
    assert _state(world.ec2, instance) == "running"
    ledger = world.runtime.ledger
    assert isinstance(ledger, MemoryLedger)
    recorded = [d for _, d in ledger.decisions if d.resource == instance]
    assert [d.rule for d in recorded] == ["idle.stop-now-unverified"]
    assert all(d.evidence.get("requested_by") is None for d in recorded)


def test_stop_now_takes_who_asked_only_from_the_verified_click(world: World) -> None:
    instance = _launch(world.ec2)
    _metrics(instance, 0.2)
    _warned(world.runtime, instance)
    token = _issue(world.runtime, _finding(instance))
    body = _body(token, STOP_NOW)
    interactions.handle(_request(body, _sign(body, NOW)), world.runtime, world.aws, Context())
    worker = world.invoker.calls.pop(0)[1]
    interactions.handle(worker, world.runtime, world.aws, Context())
    ((function, request),) = world.invoker.calls
    assert function == "governor-idle"
    request["detail"]["requested_by"] = "ceo@example.com"  # what travels on the invocation is not believed
    request["detail"]["response_url"] = "https://hooks.slack.com/actions/T9/9/other"
    assert idle_handler.handle(request, world.runtime, world.idle)["status"] == "refused"
    assert _state(world.ec2, instance) == "running"


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.slack.com.evil.example/actions/1",
        "https://evil.example/actions/1",
        "https://hooks.slack.com:8443/actions/1",
        "https://user@hooks.slack.com/actions/1",
        "https://hooks.slack.com/services/T/B/X",
        "http://127.0.0.1:9001/actions/1",
        "http://localhost/actions/1",
    ],
)
def test_response_url_is_only_ever_one_of_slacks_documented_hosts(url: str) -> None:
    with pytest.raises(ClickError):
        check_response_url(url)


def test_slack_and_govslack_response_urls_are_accepted() -> None:
    for url in ("https://hooks.slack.com/actions/T1/2/3", "https://hooks.slack-gov.com/actions/T1/2/3"):
        assert check_response_url(url) == url


def test_a_missing_signing_secret_is_read_once_a_minute_not_once_a_request() -> None:
    with mock_aws():
        now = [0.0]
        secrets = SlackSecrets("us-east-1", clock=lambda: now[0])
        runtime = _runtime(_policy())
        aws = interactions.Adapters(secrets, None, None, None)  # type: ignore[arg-type]
        body = _body("0" * 32, KEEP_HOURS)
        answers = [interactions.handle(_request(body, _sign(body, NOW)), runtime, aws, Context()) for _ in range(50)]
        assert {a["statusCode"] for a in answers} == {503} and secrets.reads == 1
        now[0] = 61.0
        interactions.handle(_request(body, _sign(body, NOW)), runtime, aws, Context())
        assert secrets.reads == 2


def test_a_signed_body_of_too_many_fields_is_answered_400_not_500(world: World) -> None:
    body = urlencode([("payload", "{}")] + [(f"f{n}", "x") for n in range(25)])
    answer = interactions.handle(_request(body, _sign(body, NOW)), world.runtime, world.aws, Context())
    assert answer["statusCode"] == 400 and world.invoker.calls == []


def test_an_oversized_body_is_answered_400_before_anything_is_read(world: World) -> None:
    body = urlencode({"payload": json.dumps({"type": "block_actions", "pad": "x" * 400_000})})
    answer = interactions.handle(_request(body, _sign(body, NOW)), world.runtime, world.aws, Context())
    assert answer["statusCode"] == 400 and world.aws.secrets.reads == 0  # type: ignore[attr-defined]


def test_an_expired_button_acts_on_nothing(world: World) -> None:
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    record = world.runtime.ledger.get_item(BUTTON_KIND, token)
    assert record is not None
    world.runtime.ledger.put_item(BUTTON_KIND, token, {**record, "expires_at": int(NOW.timestamp()) - 1})
    assert world.click(token, KEEP_HOURS)["status"] == "refused"
    assert "expired" in world.slack.posted[-1][1]["text"]


def test_a_bare_owner_tag_matches_nobody(world: World) -> None:
    """``owner=ana``: not ana@example.com, and not ana@contractor.example whom the policy also lists."""
    world.runtime = _runtime(_policy(slack_users={"UANA": OWNER, "UCON": "ana@contractor.example"}, teams={}))
    instance = _launch(world.ec2, {"owner": "ana"})
    finding = _finding(instance).model_copy(update={"owner": "ana"})
    token = _issue(world.runtime, finding)
    assert world.click(token, KEEP_HOURS, user="UCON")["status"] == "refused"
    assert world.click(token, KEEP_HOURS, action_ts="2")["status"] == "refused"
    assert "governor:keep-until" not in {
        t["Key"] for t in boto3.client("ec2", "us-east-1").describe_tags()["Tags"] if t["ResourceId"] == instance
    }
