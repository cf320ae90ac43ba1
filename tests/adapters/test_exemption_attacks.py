"""Issue 33's exemption attacks, through the real handlers on moto: nothing is spared for ever, or by nobody.

On the main branch of the time: ``governor:exempt=true`` kept an idle GPU for ever; the same tag set at launch
(RunInstances tag specifications) was never recorded; a user could exempt their own access key from rotation with
``TagUser`` and nothing recorded who; a KMS key or secret likewise; and ``eks:cluster-name`` (anyone can set it) made
an instance report-only with no end.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ec2 import Ec2Reader
from governor.domain.tagging import FIRST_SEEN, TAG_SET, setting_key
from governor.idle.handler import handle as idle_handle
from governor.keys.handler import Adapters
from governor.keys.handler import handle as keys_handle
from governor.keys.iam_keys import IamAccessKeys
from governor.keys.kms import KmsKeys
from governor.keys.secrets import SecretsRotation
from governor.lifecycle import handler as lifecycle
from governor_cli.testing import events
from governor_cli.testing.memory import FixedClock, MemoryLedger, MemorySink
from tests.adapters.test_idle_sweep import NOW, T0, _aws, _event, _metrics, _state
from tests.adapters.test_trust_boundaries import ACCOUNT, REGION, _idle_policy, _launch, _runtime
from tests.conftest import ROOT

KEYS = ROOT / "tests" / "fixtures" / "keys"


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def _recorded(runtime: Any, resource: str, key: str, value: str, at: dt.datetime, who: str = "mallory") -> None:
    """What the lifecycle or keys function keeps when CloudTrail reports the tag being set."""
    item = {"kind": TAG_SET, "resource_id": resource, "key": key, "value": value, "who": who, "at": at.isoformat()}
    runtime.ledger.put_item(TAG_SET, setting_key(resource, key), item)


# --- instances ---------------------------------------------------------------------------------------------------


def test_an_exemption_set_longer_ago_than_the_policy_allows_has_ended(ec2: Any) -> None:
    instance = _launch(ec2, {"gpu-fleet": "true", "governor:exempt": "true"})
    _metrics(instance, 0.2)
    runtime = _runtime(_idle_policy())
    _recorded(runtime, instance, "governor:exempt", "true", NOW - dt.timedelta(days=91))
    aws = _aws()
    assert idle_handle(_event(T0, "sweep-1"), runtime, aws)["outcomes"] == {"warned": 1}
    second = idle_handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["outcomes"] == {"acted": 1} and _state(ec2, instance) in ("stopping", "stopped")


def test_an_unrecorded_exemption_starts_its_clock_when_first_seen_and_says_when_it_ends(ec2: Any) -> None:
    instance = _launch(ec2, {"gpu-fleet": "true", "governor:exempt": "true"})
    _metrics(instance, 0.2)
    runtime = _runtime(_idle_policy())
    assert idle_handle(_event(T0, "sweep-1"), runtime, _aws())["outcomes"] == {"exempt": 1}
    item = runtime.ledger.get_item(TAG_SET, setting_key(instance, "governor:exempt"))
    assert item is not None and item["who"] == FIRST_SEEN and item["source"] == "first-seen"
    decision = [d for _, d in runtime.ledger.decisions if d.resource == instance][-1]  # type: ignore[attr-defined]
    end = dt.datetime.fromisoformat(item["at"]) + dt.timedelta(days=90)
    assert f"until {end.isoformat()}" in decision.reasons[0]


def _run_instances_event(instance: str, tags: dict[str, str], who: str = "mallory") -> dict[str, Any]:
    record = {
        "eventVersion": "1.08",
        "userIdentity": {"type": "IAMUser", "arn": f"arn:aws:iam::{ACCOUNT}:user/{who}", "accountId": ACCOUNT},
        "eventTime": "2026-12-01T10:00:00Z",
        "eventSource": "ec2.amazonaws.com",
        "eventName": "RunInstances",
        "awsRegion": REGION,
        "requestParameters": {"instanceType": "g5.xlarge"},
        "responseElements": {
            "instancesSet": {
                "items": [
                    {
                        "instanceId": instance,
                        "instanceType": "g5.xlarge",
                        "launchTime": 1764583200000,
                        "tagSet": {"items": [{"key": k, "value": v} for k, v in tags.items()]},
                    }
                ]
            }
        },
        "eventID": "5b3a0c1e-0000-4000-8000-000000000001",
        "eventType": "AwsApiCall",
        "recipientAccountId": ACCOUNT,
    }
    return events.envelope(events.CLOUDTRAIL, "aws.ec2", record, account=ACCOUNT, region=REGION)


def test_an_exemption_set_at_launch_is_recorded_with_its_author_and_reported(ec2: Any) -> None:
    instance = _launch(ec2, {"gpu-fleet": "true", "governor:exempt": "true", "team": "vision"})
    runtime = _runtime({})
    caps = lifecycle.Adapters(reader=Ec2Reader(REGION), tagger=_NoTags(), prices=None)  # type: ignore[arg-type]
    event = _run_instances_event(instance, {"governor:exempt": "true", "team": "vision", "gpu-fleet": "true"})
    lifecycle.handle(event, runtime, caps)
    item = runtime.ledger.get_item(TAG_SET, setting_key(instance, "governor:exempt"))
    assert item is not None and item["who"].endswith("user/mallory") and item["source"] == "RunInstances"
    for key in ("team", "gpu-fleet"):  # ownership tags have an author too
        assert runtime.ledger.get_item(TAG_SET, setting_key(instance, key)) is not None
    (finding,) = [f for f in runtime.sink.findings if "exempted" in f.title]  # type: ignore[attr-defined]
    assert "mallory" in finding.title and "honoured until 2027-03-01" in finding.detail


class _NoTags:
    def tag(self, resource_id: str, tags: dict[str, str]) -> None:
        return None


def test_a_kubernetes_tag_alone_spares_no_idle_gpu_and_is_reported(ec2: Any) -> None:
    instance = _launch(ec2, {"gpu-fleet": "true", "eks:cluster-name": "prod"})
    _metrics(instance, 0.2)
    runtime = _runtime(_idle_policy())
    aws = _aws()
    idle_handle(_event(T0, "sweep-1"), runtime, aws)
    second = idle_handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["outcomes"] == {"acted": 1}
    ignored = [f for f in runtime.sink.findings if f.rule == "idle.tags-ignored"]  # type: ignore[attr-defined]
    assert ignored and "claims a Kubernetes node" in ignored[0].detail


# --- credentials -------------------------------------------------------------------------------------------------


@pytest.fixture
def cloud() -> Iterator[None]:
    with mock_aws(config={"lambda": {"use_docker": False}}):
        yield


def _keys(days_ahead: int = 0) -> Adapters:
    clock = FixedClock(dt.datetime.now(dt.UTC) + dt.timedelta(days=days_ahead))
    return Adapters(
        kms=KmsKeys(REGION), iam=IamAccessKeys(sleep=lambda _: None), secrets=SecretsRotation(REGION), clock=clock
    )


def _tag_call(fixture: str, **params: Any) -> dict[str, Any]:
    record = json.loads((KEYS / fixture).read_text())
    record["requestParameters"] = {**copy.deepcopy(record["requestParameters"]), **params}
    record["eventTime"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return events.cloudtrail(record, event_id=f"evt-{fixture}", account=ACCOUNT, region=REGION)


@pytest.mark.parametrize(
    ("fixture", "params", "resource"),
    [
        ("tag_user.json", {"userName": "bob"}, "bob"),
        (
            "tag_resource_kms.json",
            {
                "keyId": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab",
                "tags": [{"tagKey": "governor:exempt", "tagValue": "true"}],
            },
            "1234abcd-12ab-34cd-56ef-1234567890ab",
        ),
        ("tag_resource_secret.json", {"secretId": "training-db"}, "training-db"),
    ],
    ids=["TagUser", "kms-TagResource", "secretsmanager-TagResource"],
)
def test_exempting_a_credential_is_recorded_with_its_author_and_raises_a_finding(
    cloud: None, fixture: str, params: dict[str, Any], resource: str
) -> None:
    runtime = _runtime({})
    result = keys_handle(_tag_call(fixture, **params), runtime, _keys())
    assert result["status"] == "ok"
    item = runtime.ledger.get_item(TAG_SET, setting_key(resource, "governor:exempt"))
    assert item is not None and item["who"] == "arn:aws:iam::111122223333:user/Alice"
    sink = runtime.sink
    assert isinstance(sink, MemorySink)
    (finding,) = sink.findings
    assert finding.severity == "warning" and f"exempted credential {resource}" in finding.title


def test_a_users_own_exemption_of_their_access_key_ends(cloud: None) -> None:
    iam = boto3.client("iam")
    iam.create_user(UserName="bob", Tags=[{"Key": "governor:exempt", "Value": "true"}])
    iam.create_access_key(UserName="bob")
    sweep = events.scheduled(event_id="sweep-keys", time="2026-12-01T00:00:00Z", region=REGION)
    fresh = _runtime({"keys": {"enforce": True}})
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=100)
    _recorded(fresh, "bob", "governor:exempt", "true", later - dt.timedelta(days=5), who="bob")
    keys_handle(sweep, fresh, _keys(days_ahead=100))
    assert iam.list_access_keys(UserName="bob")["AccessKeyMetadata"][0]["Status"] == "Active"  # within its 90 days
    stale = _runtime({"keys": {"enforce": True}})
    _recorded(stale, "bob", "governor:exempt", "true", later - dt.timedelta(days=91), who="bob")
    keys_handle(sweep, stale, _keys(days_ahead=100))
    assert iam.list_access_keys(UserName="bob")["AccessKeyMetadata"][0]["Status"] == "Inactive"
    assert isinstance(stale.ledger, MemoryLedger)
