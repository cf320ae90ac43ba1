"""Creator resolution and launch decisions on real CloudTrail RunInstances records, and ``explain`` for them."""

from __future__ import annotations

from typing import Any

import pytest

from governor.domain.fleet import ownership
from governor.events.envelopes import CloudTrailRecord
from governor.explain import explain
from governor.lifecycle.domain import creator, decide_launch, launches, tag_value
from governor.policy import parse_policy
from tests.unit.lifecycle_data import RECORDS, as_gpu_launch, envelope, one

POLICY = parse_policy({})
ENFORCING = parse_policy({"lifecycle": {"enforce": True}})


def test_dataset_has_the_shapes_these_tests_rely_on() -> None:
    assert len(RECORDS) == 8
    assert {r["userIdentity"]["type"] for r in RECORDS} == {"IAMUser", "AssumedRole"}
    assert any(r.get("errorCode") == "Client.VcpuLimitExceeded" for r in RECORDS)


def test_creator_of_an_iam_user_is_its_arn() -> None:
    record = CloudTrailRecord.model_validate(one(None, "IAMUser"))
    assert creator(record.user_identity) == "arn:aws:iam::123837392027:user/bert-jan"


def test_creator_of_an_assumed_role_is_the_issuing_role_and_session_name() -> None:
    records = [CloudTrailRecord.model_validate(r) for r in RECORDS if r["userIdentity"]["type"] == "AssumedRole"]
    assert len(records) == 2
    for record in records:
        session = record.user_identity.arn.rsplit("/", 1)[1]  # type: ignore[union-attr]
        role = record.user_identity.session_context["sessionIssuer"]["arn"]  # type: ignore[index]
        assert creator(record.user_identity) == f"{role}/{session}"
        assert creator(record.user_identity).startswith("arn:aws:iam::123837392027:role/stratus-red-team-ec2lui-role-")  # type: ignore[union-attr]
        assert ":sts::" not in creator(record.user_identity)  # type: ignore[operator]


def test_creator_of_other_principals() -> None:
    assert creator({"type": "Root", "arn": "arn:aws:iam::1:root"}) == "arn:aws:iam::1:root"
    assert creator({"type": "AWSService", "invokedBy": "autoscaling.amazonaws.com"}) == "autoscaling.amazonaws.com"
    federated = {"type": "FederatedUser", "arn": "arn:aws:sts::1:federated-user/ana", "principalId": "1:ana"}
    assert creator(federated) == "arn:aws:sts::1:federated-user/ana"
    sso = {
        "type": "AssumedRole",
        "principalId": "AROA1:ana@example.com",
        "arn": "arn:aws:sts::1:assumed-role/AWSReservedSSO_ML_abc/ana@example.com",
        "sessionContext": {
            "sessionIssuer": {"arn": "arn:aws:iam::1:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_ML_abc"}
        },
    }
    assert creator(sso) == "arn:aws:iam::1:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_ML_abc/ana@example.com"
    assert creator({}) is None


def test_a_creator_becomes_the_owner_when_no_owner_tag() -> None:
    who = creator(CloudTrailRecord.model_validate(one("Client.VcpuLimitExceeded", "AssumedRole")).user_identity)
    assert who is not None
    found = ownership({"governor:creator": who, "team": "research"}, POLICY.fleet)
    assert (found.owner, found.team, found.source) == (who, "research", "creator")


def test_long_creator_keeps_the_session_end() -> None:
    value = "arn:aws:iam::1:role/" + "r" * 300 + "/alice"
    assert len(tag_value(value)) == 256 and tag_value(value).endswith("/alice")


def test_failed_gpu_launch_is_ignored_and_launches_nothing() -> None:
    raw = one("Client.VcpuLimitExceeded", "AssumedRole")
    assert raw["requestParameters"]["instanceType"] == "p2.xlarge"
    record = CloudTrailRecord.model_validate(raw)
    assert launches(record) == []
    [decision] = decide_launch(record, ENFORCING)
    assert decision.verdict == "ignored" and decision.actions == []
    assert "Client.VcpuLimitExceeded" in decision.reasons[0]


def test_successful_non_gpu_launch_is_ignored() -> None:
    record = CloudTrailRecord.model_validate(one(None, "IAMUser"))
    [decision] = decide_launch(record, ENFORCING)
    assert decision.verdict == "ignored" and decision.resource.startswith("i-")
    assert "t3.micro" in decision.reasons[0]


def test_successful_gpu_launch_is_tagged_and_recorded() -> None:
    raw = as_gpu_launch(one(None, "IAMUser"))
    record = CloudTrailRecord.model_validate(raw)
    [launch] = launches(record)
    assert (launch.instance_type, launch.zone, launch.lifecycle) == ("g5.xlarge", "us-east-1a", "on-demand")
    launch_ms = raw["responseElements"]["instancesSet"]["items"][0]["launchTime"]  # epoch milliseconds
    assert launch.launched_at.timestamp() * 1000 == launch_ms
    [decision] = decide_launch(record, ENFORCING)
    assert decision.verdict == "act"
    tag, record_action = decision.actions
    assert (tag.type, tag.enforced, record_action.type, record_action.enforced) == ("tag", True, "record", True)
    assert tag.model_dump()["tags"] == {
        "governor:creator": "arn:aws:iam::123837392027:user/bert-jan",
        "governor:launched-at": launch.launched_at.isoformat().replace("+00:00", "Z"),
    }
    [report_only] = decide_launch(record, POLICY)
    assert report_only.actions[0].enforced is False and report_only.actions[1].enforced is True


def test_tags_set_by_the_user_are_never_overwritten() -> None:
    raw = as_gpu_launch(one(None, "IAMUser"))
    raw["responseElements"]["instancesSet"]["items"][0]["tagSet"]["items"].append(
        {"key": "governor:creator", "value": "ana@example.com"}
    )
    [decision] = decide_launch(CloudTrailRecord.model_validate(raw), ENFORCING)
    assert list(decision.actions[0].model_dump()["tags"]) == ["governor:launched-at"]
    assert any("existing tags kept: governor:creator" in r for r in decision.reasons)


def test_spot_launch_is_recognised() -> None:
    raw = as_gpu_launch(one(None, "IAMUser"))
    raw["requestParameters"]["instanceMarketOptions"] = {"marketType": "spot"}
    [launch] = launches(CloudTrailRecord.model_validate(raw))
    assert launch.lifecycle == "spot"


@pytest.mark.parametrize("wrap", [True, False], ids=["eventbridge", "bare-record"])
def test_explain_run_instances(wrap: bool) -> None:
    gpu = as_gpu_launch(one(None, "IAMUser"))
    result = explain(envelope(gpu) if wrap else gpu, POLICY)
    [mine] = [d for d in result["decisions"] if d["policy"] == "lifecycle"]
    assert mine["verdict"] == "act" and [a["type"] for a in mine["actions"]] == ["tag", "record"]
    assert mine["actions"][0]["enforced"] is False
    assert any("re-read" in a for a in mine["assumptions"])
    failed = explain(one("Client.VcpuLimitExceeded", "AssumedRole"), POLICY)
    assert [d["verdict"] for d in failed["decisions"] if d["policy"] == "lifecycle"] == ["ignored"]


def _state_event(state: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "state-1",
        "detail-type": "EC2 Instance State-change Notification",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2026-12-01T10:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"instance-id": "i-0abc1234def567890", "state": state},
    }


def test_explain_state_changes() -> None:
    running = explain(_state_event("running"), POLICY)
    [opened] = [d for d in running["decisions"] if d["policy"] == "lifecycle"]
    assert opened["verdict"] == "act" and opened["actions"][0]["session"] == "open"
    assert opened["resource"] == "i-0abc1234def567890"
    assert any("GPU instance" in a for a in opened["assumptions"])
    stopped = explain(_state_event("stopped"), POLICY)
    assert [d["actions"][0]["session"] for d in stopped["decisions"] if d["policy"] == "lifecycle"] == ["close"]
    pending = explain(_state_event("pending"), POLICY)
    assert [d["verdict"] for d in pending["decisions"] if d["policy"] == "lifecycle"] == ["ignored"]
