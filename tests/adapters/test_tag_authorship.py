"""Issue 45.7's leaks, through the real handlers on moto: an exemption counts only with a proven author and an end.

On the main branch of the time: tags an Auto Scaling group's launch template put on an instance arrived with AWS's
service-linked role as their author and exempted it; the recorded author of an assumed-role call was the session
name the caller chose; ``idle.exemptions.tags`` exempted whatever anyone tagged, for ever and without a word; and an
IAM user or KMS key created with ``governor:exempt`` was first recorded by the sweep, author "unknown", no finding.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ec2 import Ec2Reader
from governor.domain.tagging import TAG_SET, setting_key
from governor.idle.handler import handle as idle_handle
from governor.keys.handler import handle as keys_handle
from governor.lifecycle import handler as lifecycle
from governor_cli.testing import events
from governor_cli.testing.memory import MemorySink
from tests.adapters.test_exemption_attacks import KEYS, _keys, _NoTags, _recorded, _tag_call
from tests.adapters.test_idle_sweep import NOW, T0, _aws, _event, _metrics
from tests.adapters.test_trust_boundaries import ACCOUNT, REGION, _idle_policy, _launch, _runtime

ASG_ROLE = f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def _assumed(role: str, session: str, source_identity: str | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {
        "sessionIssuer": {"type": "Role", "principalId": "AROAEXAMPLEROLEID", "arn": role, "accountId": ACCOUNT},
        "attributes": {"mfaAuthenticated": "false", "creationDate": "2026-12-01T09:00:00Z"},
    }
    if source_identity:
        context["sourceIdentity"] = source_identity
    name = role.rsplit("/", 1)[-1]
    return {
        "type": "AssumedRole",
        "principalId": f"AROAEXAMPLEROLEID:{session}",
        "arn": f"arn:aws:sts::{ACCOUNT}:assumed-role/{name}/{session}",
        "accountId": ACCOUNT,
        "sessionContext": context,
    }


def _user(name: str) -> dict[str, Any]:
    return {"type": "IAMUser", "principalId": "AIDAEXAMPLE", "arn": f"arn:aws:iam::{ACCOUNT}:user/{name}"}


def _call(name: str, identity: dict[str, Any], at: dt.datetime, **fields: Any) -> dict[str, Any]:
    record = {
        "eventVersion": "1.08",
        "userIdentity": identity,
        "eventTime": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "eventSource": "ec2.amazonaws.com",
        "eventName": name,
        "awsRegion": REGION,
        "eventID": str(uuid.uuid4()),
        "eventType": "AwsApiCall",
        "recipientAccountId": ACCOUNT,
        **fields,
    }
    return events.cloudtrail(record)


def _create_tags(instance: str, tags: dict[str, str], identity: dict[str, Any], at: dt.datetime) -> dict[str, Any]:
    items = [{"key": k, "value": v} for k, v in tags.items()]
    params = {"resourcesSet": {"items": [{"resourceId": instance}]}, "tagSet": {"items": items}}
    return _call("CreateTags", identity, at, requestParameters=params, responseElements={"_return": True})


def _lifecycle(runtime: Any, event: dict[str, Any]) -> dict[str, Any]:
    caps = lifecycle.Adapters(reader=Ec2Reader(REGION), tagger=_NoTags(), prices=None)  # type: ignore[arg-type]
    return lifecycle.handle(event, runtime, caps)


def _findings(runtime: Any) -> list[Any]:
    sink = runtime.sink
    assert isinstance(sink, MemorySink)
    return list(sink.findings)


# --- attribution: principalId / sourceIdentity, never the session name alone ----------------------------------------


@pytest.mark.parametrize(
    ("source_identity", "via", "named"),
    [(None, "principalId", "AROAEXAMPLEROLEID:alice"), ("bob@example.com", "sourceIdentity", "bob@example.com")],
)
def test_a_session_name_the_caller_chose_is_never_recorded_as_the_author(
    ec2: Any, source_identity: str | None, via: str, named: str
) -> None:
    """Anyone who may assume ml-engineer can name the session "alice"; the record names the role and principalId
    (whose session part is shown as such), or the session's source identity, which a session cannot change."""
    instance = _launch(ec2, {"gpu-fleet": "true"})
    runtime = _runtime({})
    identity = _assumed(f"arn:aws:iam::{ACCOUNT}:role/ml-engineer", "alice", source_identity)
    _lifecycle(runtime, _create_tags(instance, {"governor:exempt": "true"}, identity, NOW - dt.timedelta(hours=1)))
    item = runtime.ledger.get_item(TAG_SET, setting_key(instance, "governor:exempt"))
    assert item is not None and item.get("via") == via and named in item["who"]
    assert item.get("principal_id") == "AROAEXAMPLEROLEID:alice"
    assert "role/ml-engineer/alice" not in item["who"]  # the role-plus-session ARN that read as the person
    (finding,) = _findings(runtime)
    assert named in finding.title


# --- tags an AWS service wrote on a launch (launch template, Auto Scaling group) ---------------------------------


def _asg_launch(instance: str, tags: dict[str, str]) -> dict[str, Any]:
    """RunInstances as Auto Scaling makes it: the service-linked role, the group's launch template, the tags."""
    identity = {
        **_assumed(ASG_ROLE, "AutoScaling"),
        "invokedBy": "autoscaling.amazonaws.com",
    }
    item = {
        "instanceId": instance,
        "instanceType": "g5.xlarge",
        "launchTime": int(NOW.timestamp() * 1000),
        "tagSet": {"items": [{"key": k, "value": v} for k, v in tags.items()]},
    }
    return _call(
        "RunInstances",
        identity,
        NOW - dt.timedelta(minutes=1),
        requestParameters={
            "instanceType": "g5.xlarge",
            "launchTemplate": {"launchTemplateId": "lt-0f1e", "version": "3"},
        },
        responseElements={"instancesSet": {"items": [item]}},
    )


@pytest.mark.parametrize("seen_launch", [True, False], ids=["launch-recorded", "launch-never-seen"])
def test_an_exemption_from_a_launch_template_holds_nothing_back(ec2: Any, seen_launch: bool) -> None:
    """A group launched from a template carrying governor:exempt=true: the service-linked role wrote the tag, nobody
    can be proven to have put it in the template, so the idle instance is warned about like any other."""
    tags = {"gpu-fleet": "true", "governor:exempt": "true", "aws:autoscaling:groupName": "train-asg"}
    instance = _launch(ec2, tags)
    _metrics(instance, 0.2)
    runtime = _runtime(_idle_policy(asg_action="report"))
    if seen_launch:
        result = _lifecycle(runtime, _asg_launch(instance, tags))
        assert [t["key"] for t in result["tags"] if t["problem"]] == ["governor:exempt"]
        item = runtime.ledger.get_item(TAG_SET, setting_key(instance, "governor:exempt"))
        assert item is not None and item["proven"] is False and item["via"] == "service"
        assert "launch template lt-0f1e version 3" in item["problem"] and "train-asg" in item["problem"]
    swept = idle_handle(_event(T0, "sweep-1"), runtime, _aws())
    assert "exempt" not in swept["outcomes"], swept["outcomes"]
    ignored = [f for f in _findings(runtime) if f.rule == "idle.tags-ignored"]
    assert ignored and "governor:exempt" in ignored[0].detail


def test_an_exemption_a_person_set_on_a_group_instance_still_holds(ec2: Any) -> None:
    tags = {"gpu-fleet": "true", "governor:exempt": "true", "aws:autoscaling:groupName": "train-asg"}
    instance = _launch(ec2, tags)
    _metrics(instance, 0.2)
    runtime = _runtime(_idle_policy(asg_action="report"))
    _lifecycle(runtime, _create_tags(instance, {"governor:exempt": "true"}, _user("ana"), NOW - dt.timedelta(days=1)))
    assert idle_handle(_event(T0, "sweep-1"), runtime, _aws())["outcomes"] == {"exempt": 1}


# --- idle.exemptions.tags: a person recorded, an end, a finding when set and when it ends -------------------------


def test_a_policy_tag_exemption_nobody_is_recorded_setting_exempts_nothing(ec2: Any) -> None:
    instance = _launch(ec2, {"gpu-fleet": "true", "env": "prod"})
    _metrics(instance, 0.2)
    runtime = _runtime(_idle_policy(exemptions={"tags": {"env": "prod"}}))
    swept = idle_handle(_event(T0, "sweep-1"), runtime, _aws())
    assert swept["outcomes"] == {"warned": 1}
    (ignored,) = [f for f in _findings(runtime) if f.rule == "idle.tags-ignored"]
    assert "env='prod'" in ignored.detail and "nobody is recorded" in ignored.detail


def test_a_policy_tag_exemption_is_reported_when_set_and_when_it_ends(ec2: Any) -> None:
    instance = _launch(ec2, {"gpu-fleet": "true", "env": "prod"})
    _metrics(instance, 0.2)
    policy = _idle_policy(exemptions={"tags": {"env": "prod"}})
    fresh = _runtime(policy)
    _lifecycle(fresh, _create_tags(instance, {"env": "prod"}, _user("mallory"), NOW - dt.timedelta(days=1)))
    found = [f for f in _findings(fresh) if "mallory exempted" in f.title]
    assert len(found) == 1 and "honoured until" in found[0].detail and "idle.exemptions.tags" in found[0].detail
    assert idle_handle(_event(T0, "sweep-1"), fresh, _aws())["outcomes"] == {"exempt": 1}
    stale = _runtime(policy)
    _recorded(stale, instance, "env", "prod", NOW - dt.timedelta(days=91))
    assert idle_handle(_event(T0, "sweep-2"), stale, _aws())["outcomes"] == {"warned": 1}
    (ended,) = [f for f in _findings(stale) if f.rule == "idle.tags-ignored"]
    assert "ended at" in ended.detail and "mallory" in ended.detail


# --- credentials created with an exemption ---------------------------------------------------------------------


@pytest.fixture
def cloud() -> Iterator[None]:
    with mock_aws(config={"lambda": {"use_docker": False}}):
        yield


def _created(fixture_name: str, **fields: Any) -> dict[str, Any]:
    record = json.loads((KEYS / "tag_user.json").read_text())
    record.update(fields, eventName=fixture_name, eventTime=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return events.cloudtrail(record, event_id=f"evt-{fixture_name}", account=ACCOUNT, region=REGION)


def test_a_user_created_exempt_is_recorded_with_its_author_and_a_finding(cloud: None) -> None:
    iam = boto3.client("iam")
    iam.create_user(UserName="carol", Tags=[{"Key": "governor:exempt", "Value": "true"}])
    runtime = _runtime({})
    params = {"userName": "carol", "tags": [{"key": "governor:exempt", "value": "true"}]}
    result = keys_handle(_created("CreateUser", requestParameters=params), runtime, _keys())
    assert result["status"] == "ok"
    item = runtime.ledger.get_item(TAG_SET, setting_key("carol", "governor:exempt"))
    assert item is not None and item["who"] == "arn:aws:iam::111122223333:user/Alice" and item["source"] == "CreateUser"
    (finding,) = _findings(runtime)
    assert finding.severity == "warning" and "exempted credential carol" in finding.title


def test_a_key_created_exempt_is_recorded_with_its_author_and_a_finding(cloud: None) -> None:
    kms = boto3.client("kms", region_name=REGION)
    key = kms.create_key(Tags=[{"TagKey": "governor:exempt", "TagValue": "true"}])["KeyMetadata"]
    record = json.loads((KEYS / "create_key_symmetric.json").read_text())
    record["requestParameters"]["tags"] = [{"tagKey": "governor:exempt", "tagValue": "true"}]
    record["responseElements"]["keyMetadata"].update(keyId=key["KeyId"], arn=key["Arn"])
    record["eventTime"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    runtime = _runtime({})
    keys_handle(events.cloudtrail(record, account=ACCOUNT, region=REGION), runtime, _keys())
    item = runtime.ledger.get_item(TAG_SET, setting_key(key["KeyId"], "governor:exempt"))
    assert (
        item is not None
        and item["source"] == "CreateKey"
        and item["who"] != "unknown: present when the governor first saw it"
    )
    exempted = [f for f in _findings(runtime) if "exempted credential" in f.title]
    assert exempted and exempted[0].severity == "warning"


def test_a_credential_exemption_first_seen_by_the_sweep_is_reported_at_once(cloud: None) -> None:
    iam = boto3.client("iam")
    iam.create_user(UserName="dave", Tags=[{"Key": "governor:exempt", "Value": "true"}])
    iam.create_access_key(UserName="dave")
    runtime = _runtime({"keys": {"enforce": True}})
    sweep = events.scheduled(event_id="sweep-keys", time="2026-12-01T00:00:00Z", region=REGION)
    keys_handle(sweep, runtime, _keys(days_ahead=100))
    first = [f for f in _findings(runtime) if "exempted credential dave" in f.title]
    assert first and first[0].severity == "warning" and "honoured until" in first[0].detail


def test_the_tag_call_fixture_still_names_its_author(cloud: None) -> None:
    """The issue 33 fixture keeps its IAM user author (an IAM user's ARN is IAM's, not the caller's choice)."""
    runtime = _runtime({})
    keys_handle(_tag_call("tag_user.json", userName="erin"), runtime, _keys())
    item = runtime.ledger.get_item(TAG_SET, setting_key("erin", "governor:exempt"))
    assert item is not None and item.get("via") == "arn" and item.get("principal_id") == "AIDACKCEVSQ6C2EXAMPLE"


# --- keys.exemptions.tags: the same rule as idle's (a person recorded, an end) ----------------------------------


def _sweep_kms(runtime: Any, key_id: str) -> dict[str, Any]:
    """The daily sweep's first decision on the key (its ARN is the resource)."""
    sweep = events.scheduled(event_id=f"sweep-{uuid.uuid4()}", time="2026-12-01T00:00:00Z", region=REGION)
    keys_handle(sweep, runtime, _keys())
    return next(d.model_dump() for _, d in runtime.ledger.decisions if d.resource.endswith(f"key/{key_id}"))


def test_a_keys_policy_tag_exemption_nobody_is_recorded_setting_exempts_nothing(cloud: None) -> None:
    """Any account user can tag a key ``env=prod``: with ``keys.exemptions.tags: {env: prod}`` that alone spared the
    key's rotation forever, in silence. Now it holds only while a person is recorded setting it, and the decision
    says why it did not hold."""
    key = boto3.client("kms", region_name=REGION).create_key(Tags=[{"TagKey": "env", "TagValue": "prod"}])
    key_id = key["KeyMetadata"]["KeyId"]
    policy = {"keys": {"enforce": True, "exemptions": {"tags": {"env": "prod"}}}}
    decision = _sweep_kms(_runtime(policy), key_id)
    assert decision["verdict"] == "act", decision
    assert any("env='prod' ignored" in r and "nobody is recorded" in r for r in decision["reasons"]), decision
    assert boto3.client("kms", region_name=REGION).get_key_rotation_status(KeyId=key_id)["KeyRotationEnabled"]


def test_a_keys_policy_tag_exemption_a_person_set_holds_until_its_end(cloud: None) -> None:
    key = boto3.client("kms", region_name=REGION).create_key(Tags=[{"TagKey": "env", "TagValue": "prod"}])
    key_id = key["KeyMetadata"]["KeyId"]
    policy = {"keys": {"enforce": True, "exemptions": {"tags": {"env": "prod"}}}}
    fresh = _runtime(policy)
    _recorded(fresh, key_id, "env", "prod", dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
    held = _sweep_kms(fresh, key_id)
    assert held["verdict"] == "ignored" and any("exempt by policy" in r for r in held["reasons"]), held
    stale = _runtime(policy)
    _recorded(stale, key_id, "env", "prod", dt.datetime.now(dt.UTC) - dt.timedelta(days=91))
    ended = _sweep_kms(stale, key_id)
    assert ended["verdict"] == "act" and any("ended at" in r for r in ended["reasons"]), ended
