"""Issues 45.5 and 46.9: Stop now's record carries its click's time, expires minutes later, acts once and only on the
instance and account its message was about; a second click on one message hands one Stop now over, not two.

Through the real endpoint (signed as Slack signs), its worker and the idle function on moto. Before, the record had
no time of its own and the idle function judged the invocation's ``time``: replayed a day later with a fresh ``time``,
it stopped the instance; a record copied under another click id for another instance stopped that one; and every
click on one message invoked the idle function again.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.events.names import STOP_REQUEST_KIND
from governor.idle import handler as idle_handler
from governor.idle.domain import MARK_KIND, Mark
from governor.interactions import handler as interactions
from governor.interactions.domain import STOP_NOW
from governor_cli.testing.memory import MemoryLedger
from tests.adapters.test_interactions import (
    NOW,
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


def _idle_at(instance: str, at: dt.datetime, world: World) -> None:
    """The instance idle (GPU samples at 0.2 %) for the three hours before ``at``, warned 30 minutes before it."""
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    for name, value in (("nvidia_smi_utilization_gpu", 0.2), ("nvidia_smi_memory_used", 12_288.0)):
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": "InstanceId", "Value": instance}],
                "Timestamp": at - dt.timedelta(minutes=m),
                "Value": value,
            }
            for m in range(0, 180)
        ]
        for start in range(0, len(data), 500):
            cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 500])
    mark = Mark(idle_since=at - dt.timedelta(minutes=45), warned_at=at - dt.timedelta(minutes=30))
    world.runtime.ledger.put_item(MARK_KIND, instance, mark.to_item(instance))


def _handed_over(world: World, token: str, *, user: str = "UANA", action_ts: str = "1700000000.000100") -> Any:
    """POST the Stop now click as Slack does and run the endpoint's worker; return what it hands the idle function
    (not run yet), or None when it handed nothing over."""
    body = _body(token, STOP_NOW, user, action_ts)
    answer = interactions.handle(_request(body, _sign(body, world.clock.now)), world.runtime, world.aws, Context())
    assert answer["statusCode"] == 200
    function, worker = world.invoker.calls.pop(0)
    assert function == Context.invoked_function_arn
    interactions.handle(worker, world.runtime, world.aws, Context())
    idle = [event for function, event in world.invoker.calls if function == "governor-idle"]
    world.invoker.calls.clear()
    return idle[0] if idle else None


def _ready(world: World, **finding: Any) -> tuple[str, str]:
    """An idle, warned GPU instance and the message about it with its buttons; (instance, token)."""
    instance = _launch(world.ec2)
    _metrics(instance, 0.2)
    _warned(world.runtime, instance)
    token = _issue(world.runtime, _finding(instance).model_copy(update=finding))
    return instance, token


def _idle_rules(world: World, instance: str) -> list[str]:
    ledger = world.runtime.ledger
    assert isinstance(ledger, MemoryLedger)
    return [str(d.rule) for _, d in ledger.decisions if d.resource == instance and d.policy == "idle"]


# --- the record's time --------------------------------------------------------------------------------------------


def test_a_stop_now_replayed_a_day_later_with_a_fresh_time_stops_nothing(world: World) -> None:
    """The hand-over never ran (parked, say); 25 h later someone replays it with a fresh ``time``: the instance is
    idle and warned again, yet the click behind the record is a day old."""
    instance, token = _ready(world)
    request = _handed_over(world, token)
    assert request is not None
    later = NOW + dt.timedelta(hours=25)
    world.clock.now = later
    _idle_at(instance, later, world)
    replayed = {**request, "time": later.strftime("%Y-%m-%dT%H:%M:%SZ")}
    result = idle_handler.handle(replayed, world.runtime, world.idle)
    assert result["status"] == "refused" and "expired" in result["reason"]
    assert _state(world.ec2, instance) == "running"
    assert world.slack.posted[-1][1]["text"].startswith("Stop now requested")  # the message is left as it was
    assert _idle_rules(world, instance) == ["idle.stop-now-unverified"]


def test_a_stop_now_record_acts_once(world: World) -> None:
    """One click, one stop: the same hand-over run again after it was answered (its idempotency record gone, the
    owner restarted the instance) is refused, and the message saying it was stopped is left alone."""
    instance, token = _ready(world)
    request = _handed_over(world, token)
    assert idle_handler.handle(request, world.runtime, world.idle)["status"] == "stopped"
    world.ec2.stop_instances(InstanceIds=[instance])
    world.ec2.start_instances(InstanceIds=[instance])  # the owner wanted it after all
    _warned(world.runtime, instance)
    posted = len(world.slack.posted)
    world.clock.now = NOW + dt.timedelta(minutes=5)
    result = idle_handler.handle(request, world.runtime, world.idle)
    assert result["status"] == "refused" and "already used" in result["reason"]
    assert _state(world.ec2, instance) == "running"
    assert len(world.slack.posted) == posted


def test_a_click_record_copied_to_another_instance_stops_neither(world: World) -> None:
    """Whoever may write the ledger and invoke the idle function copies a real click's record under another click id,
    naming another idle, warned instance: the message the click was on is about the first one."""
    first, token = _ready(world)
    other = _launch(world.ec2)
    _metrics(other, 0.2)
    _warned(world.runtime, other)
    request = _handed_over(world, token)
    record = world.runtime.ledger.get_item(STOP_REQUEST_KIND, request["id"])
    assert record is not None and record["instance_id"] == first
    copied = f"slack:{STOP_NOW}:{token}:UANA:1700000099.000100"
    world.runtime.ledger.put_item(STOP_REQUEST_KIND, copied, {**record, "instance_id": other})
    forged = {**request, "id": copied, "detail": {**request["detail"], "instance_id": other}}
    result = idle_handler.handle(forged, world.runtime, world.idle)
    assert result["status"] == "refused" and "another instance" in result["reason"]
    assert _state(world.ec2, other) == "running" and _state(world.ec2, first) == "running"


def test_a_click_about_another_accounts_instance_is_refused(world: World) -> None:
    """The warning was about an instance of a member account; the idle function acts in its own account only."""
    instance, token = _ready(world, account="210987654321")
    request = _handed_over(world, token)
    result = idle_handler.handle(request, world.runtime, world.idle, context=Context())  # account 123456789012
    assert result["status"] == "refused" and "account 210987654321" in result["reason"]
    assert _state(world.ec2, instance) == "running"


def test_an_unauthorised_click_leaves_no_record_and_its_id_stops_nothing(world: World) -> None:
    instance, token = _ready(world)
    assert _handed_over(world, token, user="UBOB") is None  # bob is not the owner, in the team, or an admin
    click = f"slack:{STOP_NOW}:{token}:UBOB:1700000000.000100"
    assert world.runtime.ledger.get_item(STOP_REQUEST_KIND, click) is None
    direct = {
        "version": "0",
        "id": click,
        "detail-type": "Stop Requested",
        "source": "gpu-fleet-governor.interactions",
        "account": "123456789012",
        "time": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [],
        "detail": {
            "instance_id": instance,
            "requested_by": "bob@example.com",
            "slack_user": "UBOB",
            "response_url": "https://hooks.slack.com/actions/T0001/123/abc",
            "token": token,
        },
    }
    assert idle_handler.handle(direct, world.runtime, world.idle)["status"] == "refused"
    assert _state(world.ec2, instance) == "running"


# --- clock skew ---------------------------------------------------------------------------------------------------


def test_a_click_within_slacks_window_of_the_idle_clock_still_stops(world: World) -> None:
    """The endpoint's clock (and Slack's timestamp) four minutes ahead of the idle function's: within Slack's own
    five-minute window, the click is a click."""
    instance, token = _ready(world)
    world.clock.now = NOW + dt.timedelta(minutes=4)
    request = _handed_over(world, token)
    world.clock.now = NOW
    assert idle_handler.handle(request, world.runtime, world.idle)["status"] == "stopped"
    assert _state(world.ec2, instance) in ("stopping", "stopped")


def test_a_click_stamped_an_hour_ahead_of_the_idle_clock_is_refused(world: World) -> None:
    """Slack's timestamp is checked against the endpoint's clock: an endpoint an hour fast accepts a click stamped
    an hour ahead. The idle function, on the right time, does not take that for a click made now (before, an
    invocation ``time`` in the future read as a fresh request)."""
    instance, token = _ready(world)
    world.clock.now = NOW + dt.timedelta(hours=1)
    request = _handed_over(world, token)
    world.clock.now = NOW
    result = idle_handler.handle(request, world.runtime, world.idle)
    assert result["status"] == "refused" and "ahead of this function's clock" in result["reason"]
    assert _state(world.ec2, instance) == "running"


# --- issue 46.9: one hand-over per message -------------------------------------------------------------------------


def test_a_second_click_on_the_same_message_invokes_the_idle_function_once(world: World) -> None:
    """The endpoint's hand-over answer was lost (Slack shows the user an error) and the user clicks again: a new
    Slack action, so the worker's idempotency on the click's id lets it through. The message's Stop now is claimed by
    the first click: the second hands nothing over and tells the user so."""
    instance, token = _ready(world)
    first = _handed_over(world, token)
    world.clock.now = NOW + dt.timedelta(seconds=20)
    second = _handed_over(world, token, action_ts="1700000020.000100")
    assert first is not None and second is None
    assert "already requested" in world.slack.posted[-1][1]["text"]
    assert world.slack.posted[-1][1]["response_type"] == "ephemeral"
    assert idle_handler.handle(first, world.runtime, world.idle)["status"] == "stopped"
    assert _state(world.ec2, instance) in ("stopping", "stopped")


def test_a_click_after_the_checkpoint_answer_is_handed_over(world: World) -> None:
    """ "Click Stop now again once it has finished": once the idle function has answered the first click (here: a
    checkpoint first), the next click on the message is handed over."""
    raw = _policy()
    raw["fleet"]["checkpoint_commands"] = {"train": "pkill -USR1 train"}
    world.runtime = _runtime(raw)
    instance = _launch(world.ec2, {"governor:checkpoint-command": "train"})
    _metrics(instance, 0.2)
    _warned(world.runtime, instance)
    token = _issue(world.runtime, _finding(instance))
    first = _handed_over(world, token)
    assert idle_handler.handle(first, world.runtime, world.idle)["status"] == "checkpointing"
    world.clock.now = NOW + dt.timedelta(minutes=2)
    second = _handed_over(world, token, action_ts="1700000120.000100")
    assert second is not None and second["id"] != first["id"]
