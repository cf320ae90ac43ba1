"""Slack buttons end to end on moto: Slack's real request format, signed by hand, through the endpoint and its worker.

Requests are ``application/x-www-form-urlencoded`` with one ``payload=`` field of JSON, signed as Slack signs them
(``v0=`` HMAC-SHA256 of ``v0:{timestamp}:{body}``). The signature here is computed with ``hmac`` directly, not with
the library the endpoint uses, so a mistake in how the endpoint calls it cannot cancel out.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
from typing import Any
from urllib.parse import urlencode

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.slack_app import SlackSecrets
from governor.adapters.ssm import SsmCommands
from governor.domain.decision import Finding
from governor.idle import handler as idle_handler
from governor.idle.domain import MARK_KIND, Mark
from governor.idle.metrics import CloudWatchMetrics
from governor.interactions import handler as interactions
from governor.interactions.domain import (
    ACKNOWLEDGE,
    BUTTON_KIND,
    KEEP_HOURS,
    KEEP_MORNING,
    STOP_NOW,
    button_record,
    button_token,
)
from governor.interactions.slack_calls import SnoozeTagger
from governor.notifier.domain import MergedFinding
from governor.notifier.handler import with_buttons
from governor.notifier.render import slack_messages
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.demo.bootstrap import create_shared
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # Slack's documented example signing secret
NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(hours=2)
RESPONSE_URL = "https://hooks.slack.com/actions/T0001/123/abc"
OWNER = "ana@example.com"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> dt.datetime:
        return self.now


class Invoker:
    """Lambda's async invoke, recorded: (function, event)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def invoke(self, function: str, event: dict[str, Any]) -> None:
        self.calls.append((function, json.loads(json.dumps(event))))


class Slack:
    """What the endpoint posted to response_url."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, url: str, message: dict[str, Any]) -> bool:
        self.posted.append((url, message))
        return True


class Context:
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:governor-interactions"
    function_name = "governor-interactions"
    memory_limit_in_mb = 512
    aws_request_id = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def _policy(**interactions: Any) -> dict[str, Any]:
    return {
        "fleet": {"max_snooze_days": 2},
        "idle": {"enforce": True, "launch_grace_minutes": 0, "max_fleet_percent": 100},
        "interactions": {
            "enforce": True,
            "buttons": True,
            "slack_users": {"UANA": OWNER, "UBOB": "bob@example.com", "UCAROL": "carol@example.com"},
            "admins": ["admin@example.com"],
            "teams": {"vision": {"members": ["carol@example.com"], "timezone": "Europe/Berlin"}},
            **interactions,
        },
    }


def _runtime(raw: dict[str, Any]) -> Runtime:
    return Runtime(
        policy=parse_policy(raw),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region="us-east-1",
    )


def _launch(ec2: Any, tags: dict[str, str] | None = None) -> str:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    chosen = {"owner": OWNER, "team": "vision", "gpu-fleet": "true", **(tags or {})}
    found = ec2.run_instances(
        ImageId=image,
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in chosen.items()]}],
    )
    return str(found["Instances"][0]["InstanceId"])


def _metrics(instance_id: str, util: float) -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    for name, value in (("nvidia_smi_utilization_gpu", util), ("nvidia_smi_memory_used", 12_288.0)):
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
                "Timestamp": NOW - dt.timedelta(minutes=m),
                "Value": value,
            }
            for m in range(0, 200)
        ]
        for start in range(0, len(data), 500):
            cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 500])


def _state(ec2: Any, instance_id: str) -> str:
    return str(ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"])


def _tags(ec2: Any, instance_id: str) -> dict[str, str]:
    found = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in found.get("Tags", [])}


def _finding(resource: str, rule: str = "idle.warned", policy: str = "idle") -> Finding:
    return Finding(
        policy=policy,
        rule=rule,
        severity="warning",
        resource=resource,
        title=f"Idle GPU instance {resource} will be stopped",
        owner=OWNER,
        team="vision",
        event_id="sweep-1",
        at=NOW,
    )


def _issue(runtime: Runtime, finding: Finding) -> str:
    """What the notifier does when it sends the message: the token's record in the ledger (expiring in a week)."""
    token = button_token(finding)
    expires = int((NOW + dt.timedelta(days=7)).timestamp())
    runtime.ledger.put_item(BUTTON_KIND, token, {**button_record(finding, token), "expires_at": expires})
    return token


def _warned(runtime: Runtime, instance: str) -> None:
    """What the idle sweep keeps when it warns: the idle spell's mark, with the warning's publication time."""
    mark = Mark(idle_since=NOW - dt.timedelta(minutes=45), warned_at=NOW - dt.timedelta(minutes=30))
    runtime.ledger.put_item(MARK_KIND, instance, mark.to_item(instance))


def _body(token: str, action_id: str, user: str = "UANA", action_ts: str = "1700000000.000100") -> str:
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": "T0001"},
        "team": {"id": "T0001", "domain": "example"},
        "response_url": RESPONSE_URL,
        "trigger_id": "123.456.abc",
        "message": {
            "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": "Idle GPU instance"}},
                {"type": "actions", "block_id": f"governor:{token}", "elements": []},
            ]
        },
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": f"governor:{token}",
                "value": token,
                "action_ts": action_ts,
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)})


def _sign(body: str, at: dt.datetime, secret: str = SECRET) -> dict[str, str]:
    timestamp = str(int(at.timestamp()))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": timestamp,
        "x-slack-signature": f"v0={digest}",
    }


def _request(body: str, headers: dict[str, str], *, base64_body: bool = False) -> dict[str, Any]:
    """A Lambda Function URL event (payload format 2.0), as Slack's POST arrives."""
    return {
        "version": "2.0",
        "rawPath": "/",
        "headers": headers,
        "requestContext": {"http": {"method": "POST", "path": "/", "sourceIp": "3.3.3.3"}, "timeEpoch": 0},
        "body": base64.b64encode(body.encode()).decode() if base64_body else body,
        "isBase64Encoded": base64_body,
    }


class World:
    """moto's account, the endpoint's adapters, and the idle function behind it."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.ec2 = boto3.client("ec2", region_name="us-east-1")
        boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name="governor/slack-signing-secret", SecretString=SECRET
        )
        self.runtime = _runtime(raw)
        self.clock = Clock()
        self.invoker = Invoker()
        self.slack = Slack()
        self.aws = interactions.Adapters(
            SlackSecrets("us-east-1"),
            Ec2Reader("us-east-1", wildcard_type_filter=False),
            SnoozeTagger("us-east-1"),
            self.invoker,  # type: ignore[arg-type]
            idle_function="governor-idle",
            respond=self.slack,
            clock=self.clock,
        )
        self.idle = idle_handler.Adapters(
            Ec2Reader("us-east-1", wildcard_type_filter=False),
            Ec2Actions("us-east-1"),
            CloudWatchMetrics("us-east-1"),
            SsmCommands("us-east-1"),
            None,
            self.clock,
            respond=self.slack,
        )

    def click(self, token: str, action_id: str, user: str = "UANA", **options: Any) -> dict[str, Any]:
        """POST as Slack does, then run what the endpoint handed over (its worker, then idle for Stop now)."""
        body = _body(token, action_id, user, options.get("action_ts", "1700000000.000100"))
        answer = interactions.handle(_request(body, _sign(body, self.clock.now)), self.runtime, self.aws, Context())
        assert answer["statusCode"] == 200, answer
        return self.drain()

    def drain(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        while self.invoker.calls:
            function, event = self.invoker.calls.pop(0)
            if function == "governor-idle":
                result = idle_handler.handle(event, self.runtime, self.idle)
            else:
                result = interactions.handle(event, self.runtime, self.aws, Context())
        return result

    def decisions(self, rule: str) -> list[Any]:
        ledger = self.runtime.ledger
        assert isinstance(ledger, MemoryLedger)
        return [d for _, d in ledger.decisions if d.rule == rule]


@pytest.fixture
def world() -> Any:
    with mock_aws():
        yield World(_policy())


# --- the signature ------------------------------------------------------------------------------------------------


def test_a_valid_signed_click_is_answered_at_once_and_handed_to_the_worker(world: World) -> None:
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    body = _body(token, KEEP_HOURS)
    answer = interactions.handle(_request(body, _sign(body, NOW)), world.runtime, world.aws, Context())
    assert answer["statusCode"] == 200 and answer["body"] == ""
    assert len(world.invoker.calls) == 1
    function, event = world.invoker.calls[0]
    assert function == Context.invoked_function_arn  # to itself, asynchronously: the work happens after the answer
    assert event["detail"]["token"] == token and instance not in json.dumps(event)  # the click names no instance
    assert "governor:keep-until" not in _tags(world.ec2, instance)  # nothing done before the worker runs


def test_the_endpoint_hands_over_on_its_quick_client_so_slack_is_answered_within_three_seconds(world: World) -> None:
    from dataclasses import replace

    from governor.interactions.slack_calls import endpoint_client, endpoint_worst_seconds

    quick = Invoker()
    world.aws = replace(world.aws, handover=quick)  # type: ignore[arg-type]
    token = _issue(world.runtime, _finding(_launch(world.ec2)))
    body = _body(token, KEEP_HOURS)
    answer = interactions.handle(_request(body, _sign(body, NOW)), world.runtime, world.aws, Context())
    assert answer["statusCode"] == 200 and len(quick.calls) == 1 and world.invoker.calls == []
    config = endpoint_client("lambda", "us-east-1").meta.config
    assert config.retries["total_max_attempts"] == 1  # botocore never resends the hand-over
    assert endpoint_worst_seconds(calls=1) < 3  # a warm container: one call, one attempt, both timeouts


def test_a_base64_encoded_body_verifies_too(world: World) -> None:
    token = _issue(world.runtime, _finding(_launch(world.ec2)))
    body = _body(token, KEEP_HOURS)
    event = _request(body, _sign(body, NOW), base64_body=True)
    assert interactions.handle(event, world.runtime, world.aws, Context())["statusCode"] == 200


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda body: (body, _sign(body, NOW - dt.timedelta(minutes=6))), id="stale"),
        pytest.param(lambda body: (body, _sign(body, NOW + dt.timedelta(minutes=6))), id="from-the-future"),
        pytest.param(lambda body: (body.replace("UANA", "UBOB"), _sign(body, NOW)), id="tampered-body"),
        pytest.param(lambda body: (body, _sign(body, NOW, secret="not-the-secret")), id="wrong-secret"),
        pytest.param(lambda body: (body, {"content-type": "application/x-www-form-urlencoded"}), id="unsigned"),
        pytest.param(
            lambda body: (body, {**_sign(body, NOW), "x-slack-request-timestamp": "soon"}), id="bad-timestamp"
        ),
    ],
)
def test_forged_or_stale_requests_change_nothing(world: World, forge: Any) -> None:
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    body, headers = forge(_body(token, STOP_NOW))
    answer = interactions.handle(_request(body, headers), world.runtime, world.aws, Context())
    assert answer["statusCode"] == 401
    assert world.invoker.calls == [] and world.slack.posted == []
    assert _state(world.ec2, instance) == "running"


def test_a_replayed_request_acts_once(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    local = create_shared("us-east-1")
    monkeypatch.setenv("IDEMPOTENCY_TABLE", local.idempotency_table)
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    body = _body(token, KEEP_HOURS)
    request = _request(body, _sign(body, NOW))
    for _ in range(2):  # the same signed request within its five minutes (an attacker's replay, or Slack's retry)
        assert interactions.handle(request, world.runtime, world.aws, Context())["statusCode"] == 200
    world.drain()
    assert len(world.decisions("interactions.keep")) == 1
    assert len(world.slack.posted) == 1


def test_a_signed_request_that_is_no_click_is_refused_in_one_line(world: World) -> None:
    body = urlencode({"payload": json.dumps({"type": "view_submission"})})
    answer = interactions.handle(_request(body, _sign(body, NOW)), world.runtime, world.aws, Context())
    assert answer["statusCode"] == 400
    assert "view_submission" in json.loads(answer["body"])["text"]
    assert world.invoker.calls == []


def test_a_missing_signing_secret_refuses_every_request() -> None:
    with mock_aws():
        runtime = _runtime(_policy())
        aws = interactions.Adapters(
            SlackSecrets("us-east-1"),
            Ec2Reader("us-east-1"),
            SnoozeTagger("us-east-1"),
            Invoker(),  # type: ignore[arg-type]
        )
        body = _body("0" * 32, KEEP_HOURS)
        answer = interactions.handle(_request(body, _sign(body, NOW)), runtime, aws, Context())
        assert answer["statusCode"] == 503


# --- every button -------------------------------------------------------------------------------------------------


def test_keep_4h_snoozes_the_instance_and_records_who_clicked(world: World) -> None:
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    result = world.click(token, KEEP_HOURS)
    until = (NOW + dt.timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert result["status"] == "kept"
    assert _tags(world.ec2, instance)["governor:keep-until"] == until
    (decision,) = world.decisions("interactions.keep")
    assert decision.evidence["clicked_by"] == OWNER and decision.evidence["slack_user"] == "UANA"
    url, message = world.slack.posted[-1]
    assert url == RESPONSE_URL and message["replace_original"] is True
    assert f"Kept until {until}" in message["text"] and OWNER in message["text"]
    assert not any(b.get("block_id") == f"governor:{token}" for b in message["blocks"])  # the buttons are gone


def test_keep_until_tomorrow_is_nine_in_the_teams_time_zone(world: World) -> None:
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    world.click(token, KEEP_MORNING)
    value = dt.datetime.fromisoformat(_tags(world.ec2, instance)["governor:keep-until"].replace("Z", "+00:00"))
    berlin = value.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin"))
    assert (berlin.hour, berlin.minute) == (9, 0)
    assert berlin.date() == NOW.astimezone(berlin.tzinfo).date() + dt.timedelta(days=1)


def test_a_snooze_beyond_the_maximum_is_capped(world: World) -> None:
    world.runtime = _runtime(_policy(keep_hours=24 * 5))  # fleet.max_snooze_days is 2
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    world.click(token, KEEP_HOURS)
    limit = (NOW + dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert _tags(world.ec2, instance)["governor:keep-until"] == limit
    (kept,) = world.decisions("interactions.keep")
    assert any("capped at fleet.max_snooze_days (2)" in reason for reason in kept.reasons)


def test_no_snooze_when_snoozes_are_switched_off(world: World) -> None:
    raw = _policy()
    raw["fleet"]["max_snooze_days"] = 0
    world.runtime = _runtime(raw)
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    assert world.click(token, KEEP_HOURS)["status"] == "refused"
    assert "governor:keep-until" not in _tags(world.ec2, instance)


def test_stop_now_stops_an_idle_instance_through_the_idle_function(world: World) -> None:
    instance = _launch(world.ec2)
    _metrics(instance, 0.2)
    _warned(world.runtime, instance)
    token = _issue(world.runtime, _finding(instance))
    result = world.click(token, STOP_NOW)
    assert result["status"] == "stopped", result
    assert _state(world.ec2, instance) in ("stopping", "stopped")
    (asked,) = world.decisions("interactions.stop-now")
    assert asked.evidence["clicked_by"] == OWNER
    stopped = world.decisions("idle.stop-now")[-1]  # recorded before acting, then with what was done (one key)
    assert stopped.evidence["requested_by"] == OWNER and stopped.evidence["done"][0] == "stopped"
    assert any(f.rule == "idle.stop-now" for f in world.runtime.sink.findings)  # type: ignore[attr-defined]
    assert "stopped for ana@example.com" in world.slack.posted[-1][1]["text"]


def test_stop_now_on_an_instance_that_became_busy_is_refused(world: World) -> None:
    instance = _launch(world.ec2)
    _metrics(instance, 85.0)
    _warned(world.runtime, instance)
    token = _issue(world.runtime, _finding(instance))
    result = world.click(token, STOP_NOW)
    assert result["status"] == "refused"
    assert _state(world.ec2, instance) == "running"
    (refused,) = world.decisions("idle.stop-now-refused")
    assert "busy" in refused.reasons[0]
    assert "Not stopped" in world.slack.posted[-1][1]["text"]


def test_stop_now_on_a_snoozed_instance_is_refused(world: World) -> None:
    until = (NOW + dt.timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    instance = _launch(world.ec2, {"governor:keep-until": until})
    _metrics(instance, 0.2)
    token = _issue(world.runtime, _finding(instance))
    assert world.click(token, STOP_NOW)["status"] == "refused"
    assert _state(world.ec2, instance) == "running"


def test_acknowledge_records_who_acknowledged_a_spot_finding(world: World) -> None:
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance, rule="spot.interruption", policy="spot"))
    assert world.click(token, ACKNOWLEDGE)["status"] == "acknowledged"
    (ack,) = world.decisions("interactions.acknowledge")
    assert ack.evidence["clicked_by"] == OWNER and ack.resource == instance
    assert "Acknowledged by ana@example.com" in world.slack.posted[-1][1]["text"]


def test_a_button_the_message_never_had_is_refused(world: World) -> None:
    instance = _launch(world.ec2)
    _metrics(instance, 0.2)
    token = _issue(world.runtime, _finding(instance, rule="spot.interruption", policy="spot"))
    assert world.click(token, STOP_NOW)["status"] == "refused"  # a Spot finding has no Stop now
    assert _state(world.ec2, instance) == "running"
    assert world.click("f" * 32, KEEP_HOURS, action_ts="2")["status"] == "refused"  # a token nobody issued


# --- who may click ------------------------------------------------------------------------------------------------


def test_someone_else_gets_not_yours_and_a_recorded_refusal(world: World) -> None:
    instance = _launch(world.ec2)
    _metrics(instance, 0.2)
    token = _issue(world.runtime, _finding(instance))
    result = world.click(token, STOP_NOW, user="UBOB")
    assert result["status"] == "refused"
    assert _state(world.ec2, instance) == "running" and "governor:keep-until" not in _tags(world.ec2, instance)
    (refusal,) = world.decisions("interactions.refused")
    assert refusal.evidence["clicked_by"] == "bob@example.com"
    message = world.slack.posted[-1][1]
    assert message["response_type"] == "ephemeral" and message["replace_original"] is False
    assert "not yours" in message["text"]


def test_an_unknown_slack_user_is_refused(world: World) -> None:
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    assert world.click(token, KEEP_HOURS, user="UNOBODY")["status"] == "refused"
    assert "governor:keep-until" not in _tags(world.ec2, instance)


def test_the_team_and_the_admins_may_act_by_the_instances_own_tags(world: World) -> None:
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    assert world.click(token, KEEP_HOURS, user="UCAROL")["status"] == "kept"  # carol is in team vision
    raw = _policy(slack_users={"UADMIN": "admin@example.com"})
    world.runtime = _runtime(raw)
    token = _issue(world.runtime, _finding(instance))
    assert world.click(token, KEEP_HOURS, user="UADMIN", action_ts="3")["status"] == "kept"


def test_retagging_after_the_message_gives_nobody_new_rights_and_is_recorded(world: World) -> None:
    """Authorised against the owner and team recorded when the message was sent (issue 33: retagging ``team=`` gave
    another team Stop-now rights, unrecorded); the change since is written next to the click."""
    raw = _policy(teams={"nlp": {"members": ["bob@example.com"]}, "vision": {"members": ["carol@example.com"]}})
    world.runtime = _runtime(raw)
    instance = _launch(world.ec2)
    token = _issue(world.runtime, _finding(instance))
    world.ec2.create_tags(
        Resources=[instance], Tags=[{"Key": "owner", "Value": "bob@example.com"}, {"Key": "team", "Value": "nlp"}]
    )
    assert world.click(token, KEEP_HOURS, user="UBOB")["status"] == "refused"  # bob's retag bought him nothing
    assert world.click(token, KEEP_HOURS, action_ts="9")["status"] == "kept"  # ana still decides about her warning
    (kept,) = world.decisions("interactions.keep")
    assert any("team tag changed since the message: vision -> nlp" in reason for reason in kept.reasons)


def test_report_only_records_and_answers_but_changes_nothing(world: World) -> None:
    world.runtime = _runtime(_policy(enforce=False))
    instance = _launch(world.ec2)
    _metrics(instance, 0.2)
    token = _issue(world.runtime, _finding(instance))
    assert world.click(token, KEEP_HOURS)["status"] == "report-only"
    assert world.click(token, STOP_NOW, action_ts="4")["status"] == "report-only"
    assert "governor:keep-until" not in _tags(world.ec2, instance)
    assert _state(world.ec2, instance) == "running"
    assert world.decisions("interactions.keep") and world.decisions("interactions.stop-now")
    assert "report-only" in world.slack.posted[-1][1]["text"]


def test_a_report_only_keep_is_never_contradicted_by_a_later_would_be_stopped(world: World) -> None:
    """Issue 37: bo clicked Keep 4 h in report-only mode, and a later message said "would be stopped now"."""
    raw = _policy(enforce=False)
    raw["idle"] = {**raw["idle"], "enforce": False}
    world.runtime = _runtime(raw)
    instance = _launch(world.ec2)
    _metrics(instance, 0.2)
    _warned(world.runtime, instance)  # the warning ran out: the stop is due now
    token = _issue(world.runtime, _finding(instance))
    assert world.click(token, KEEP_HOURS)["status"] == "report-only"
    assert "governor:keep-until" not in _tags(world.ec2, instance)  # report-only: no tag
    idle_handler.handle(events.scheduled(time=world.clock.now.isoformat()), world.runtime, world.idle)
    (decision,) = [d for _, d in world.runtime.ledger.decisions if d.resource == instance and d.policy == "idle"]
    assert decision.evidence["status"] == "snoozed" and decision.verdict == "ignored"
    findings = [f for f in world.runtime.sink.findings if f.resource == instance]  # type: ignore[attr-defined]
    assert not findings  # nothing "would be stopped now"


def test_an_enforcing_idle_policy_ignores_a_report_only_keep(world: World) -> None:
    """Only a real snooze tag spares an instance a real stop: buttons in report-only change nothing that enforces."""
    world.runtime = _runtime(_policy(enforce=False))  # buttons report-only, idle enforcing
    instance = _launch(world.ec2)
    _metrics(instance, 0.2)
    _warned(world.runtime, instance)
    token = _issue(world.runtime, _finding(instance))
    world.click(token, KEEP_HOURS)
    idle_handler.handle(events.scheduled(time=world.clock.now.isoformat()), world.runtime, world.idle)
    assert _state(world.ec2, instance) in ("stopping", "stopped")


# --- the message --------------------------------------------------------------------------------------------------


def test_the_warning_carries_the_three_buttons_with_only_an_opaque_value(world: World) -> None:
    instance = _launch(world.ec2)
    item = with_buttons(MergedFinding(_finding(instance)), world.runtime, NOW)
    (message,) = slack_messages([item])
    (actions,) = [b for b in message["blocks"] if b["type"] == "actions"]
    assert [e["action_id"] for e in actions["elements"]] == [KEEP_HOURS, KEEP_MORNING, STOP_NOW]
    assert [e["text"]["text"] for e in actions["elements"]] == ["Keep 4 h", "Keep until tomorrow 09:00", "Stop now"]
    values = {e["value"] for e in actions["elements"]}
    assert len(values) == 1 and instance not in values.pop()
    assert world.runtime.ledger.get_item(BUTTON_KIND, button_token(_finding(instance)))["resource"] == instance
    spot = with_buttons(MergedFinding(_finding(instance, "spot.interruption", "spot")), world.runtime, NOW)
    assert [e["action_id"] for e in (spot.buttons or {})["elements"]] == [ACKNOWLEDGE]


def test_no_buttons_until_the_policy_asks_for_them(world: World) -> None:
    world.runtime = _runtime(_policy(buttons=False))
    item = with_buttons(MergedFinding(_finding("i-0123456789abcdef0")), world.runtime, NOW)
    assert item.buttons is None
