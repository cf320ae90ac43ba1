"""The Slack interaction endpoint's infrastructure: a Function URL Slack can reach, a role that can do almost nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from governor.capability import BASE_PERMISSIONS
from governor.policy import Policy, load_policy
from governor.registry import REGISTRY
from infra.app_builder import build_app
from tests.infra.conftest import Synth
from tests.infra.policy_eval import RolePolicy, arn_of, role_policy

FLEET_GPU = "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"


class PolicySynth(Synth):
    """The shipped policy with its ``interactions`` section changed, synthesized like the default stack."""

    def __init__(self, outdir: Path, **interactions: Any) -> None:
        shipped = load_policy(Path(__file__).resolve().parents[2] / "governor.yaml")
        self.policy = shipped.model_copy(update={"interactions": shipped.interactions.model_copy(update=interactions)})
        super().__init__(outdir)

    def _build(self, outdir: Path) -> Any:
        return build_app(policy=self.policy, outdir=str(outdir))


@pytest.fixture(scope="module")
def buttons_on(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return PolicySynth(tmp_path_factory.mktemp("buttons-on"), buttons=True)


@pytest.fixture(scope="module")
def buttons_off(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return PolicySynth(tmp_path_factory.mktemp("buttons-off"), buttons=False)


def _function(synth: Synth, handler: str) -> tuple[str, dict[str, Any]]:
    [(logical_id, function)] = [
        (k, v)
        for k, v in synth.resources("AWS::Lambda::Function").items()
        if v["Properties"].get("Handler") == f"governor.{handler}.handler.lambda_handler"
    ]
    return logical_id, function


def _role(synth: Synth) -> RolePolicy:
    _, function = _function(synth, "interactions")
    return role_policy(synth.json, function["Properties"]["Role"]["Fn::GetAtt"][0])


def test_slack_reaches_the_function_through_a_url_that_only_invokes_it(buttons_on: Synth) -> None:
    synth = buttons_on
    function_id, _ = _function(synth, "interactions")
    [url] = synth.resources("AWS::Lambda::Url").values()
    assert url["Properties"]["AuthType"] == "NONE"
    assert url["Properties"]["TargetFunctionArn"] == {"Fn::GetAtt": [function_id, "Arn"]}
    public = [
        p["Properties"]
        for p in synth.resources("AWS::Lambda::Permission").values()
        if p["Properties"].get("Principal") == "*"
    ]
    assert public and all(p["FunctionName"] == {"Fn::GetAtt": [function_id, "Arn"]} for p in public)
    assert all(p.get("FunctionUrlAuthType") == "NONE" or p.get("InvokedViaFunctionUrl") is True for p in public)
    output = synth.json["Outputs"]["SlackInteractivityUrl"]["Value"]
    assert output["Fn::GetAtt"][1] == "FunctionUrl"


def test_the_role_grants_what_the_endpoint_code_declares_and_nothing_more(synth: Synth) -> None:
    declared = REGISTRY["interactions"].permissions(synth.stack.policy)
    assert _role(synth).granted_actions() - BASE_PERMISSIONS == declared
    assert declared == {
        "ec2:DescribeInstances",
        "secretsmanager:GetSecretValue",
        "ec2:CreateTags",
        "lambda:InvokeFunction",
    }  # Stop now is the idle function's: no ec2:StopInstances here


def test_only_the_snooze_tag_only_on_fleet_gpu_instances(synth: Synth) -> None:
    role = _role(synth)
    fleet = {"ec2:InstanceType": "g5.xlarge", "aws:ResourceTag/gpu-fleet": "true"}
    assert role.allows("ec2:CreateTags", FLEET_GPU, **fleet, **{"aws:TagKeys": ["governor:keep-until"]})
    assert not role.allows("ec2:CreateTags", FLEET_GPU, **fleet, **{"aws:TagKeys": ["governor:exempt"]})
    assert not role.allows("ec2:CreateTags", FLEET_GPU, **fleet, **{"aws:TagKeys": ["governor:keep-until", "owner"]})
    outside = {"ec2:InstanceType": "g5.xlarge", "aws:ResourceTag/gpu-fleet": "false"}
    assert not role.allows("ec2:CreateTags", FLEET_GPU, **outside, **{"aws:TagKeys": ["governor:keep-until"]})
    cpu = {"ec2:InstanceType": "m5.large", "aws:ResourceTag/gpu-fleet": "true"}
    assert not role.allows("ec2:CreateTags", FLEET_GPU, **cpu, **{"aws:TagKeys": ["governor:keep-until"]})
    for action in ("ec2:StopInstances", "ec2:TerminateInstances", "ec2:DeleteTags", "ssm:SendCommand"):
        assert not role.allows(action, FLEET_GPU, **fleet)


def test_it_invokes_only_itself_and_the_idle_function_and_reads_only_the_signing_secret(synth: Synth) -> None:
    role = _role(synth)
    own, _ = _function(synth, "interactions")
    idle, _ = _function(synth, "idle")
    notifier, _ = _function(synth, "notifier")
    assert role.allows("lambda:InvokeFunction", arn_of(synth.json, own))
    assert role.allows("lambda:InvokeFunction", arn_of(synth.json, idle))
    assert not role.allows("lambda:InvokeFunction", arn_of(synth.json, notifier))
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:governor/slack-signing-secret-AbCdEf"
    webhook = "arn:aws:secretsmanager:us-east-1:123456789012:secret:governor/slack-webhook-AbCdEf"
    assert role.allows("secretsmanager:GetSecretValue", secret)
    assert not role.allows("secretsmanager:GetSecretValue", webhook)


def test_stop_now_goes_to_the_idle_function_named_in_the_environment(synth: Synth) -> None:
    _, function = _function(synth, "interactions")
    idle, _ = _function(synth, "idle")
    assert function["Properties"]["Environment"]["Variables"]["IDLE_FUNCTION"] == {"Ref": idle}


def test_no_public_endpoint_is_deployed_while_buttons_are_off(buttons_off: Synth) -> None:
    """Issue 33: the Function URL was deployed although the shipped policy puts no button on any message."""
    assert buttons_off.resources("AWS::Lambda::Url") == {}
    public = [
        p for p in buttons_off.resources("AWS::Lambda::Permission").values() if p["Properties"]["Principal"] == "*"
    ]
    assert public == [] and "SlackInteractivityUrl" not in buttons_off.json.get("Outputs", {})
    _, function = _function(buttons_off, "interactions")
    assert "ReservedConcurrentExecutions" not in function["Properties"]  # nothing to throttle without an endpoint


def test_the_public_endpoint_is_throttled_by_reserved_concurrency_the_preflight_counts(buttons_on: Synth) -> None:
    """Issue 33: the endpoint had no throttle; its reserved concurrency is what the deploy's preflight checks."""
    _, function = _function(buttons_on, "interactions")
    reserved = function["Properties"]["ReservedConcurrentExecutions"]
    policy: Policy = buttons_on.stack.policy
    assert reserved == policy.interactions.reserved_concurrency == policy.interactions.endpoint_concurrency() == 5


def test_forged_requests_and_throttles_raise_alarms(synth: Synth) -> None:
    metrics = {a["Properties"].get("MetricName") for a in synth.resources("AWS::CloudWatch::Alarm").values()}
    assert {"InteractionsForged", "InteractionsRefused", "Throttles"} <= metrics


def test_every_function_outlasts_one_aws_call_that_times_out_on_every_attempt(synth: Synth) -> None:
    """The interactions worker had 30 s while one call with the shared retries can take 105 s: Lambda ended it."""
    from bench.soak import worst_single_call

    _, worst = worst_single_call()
    timeouts = {
        v["Properties"]["Handler"].split(".")[1]: v["Properties"].get("Timeout", 3)
        for v in synth.resources("AWS::Lambda::Function").values()
        if str(v["Properties"].get("Handler", "")).endswith(".handler.lambda_handler")
    }
    assert "interactions" in timeouts and len(timeouts) >= 8
    assert {name: seconds for name, seconds in timeouts.items() if seconds < worst} == {}
