"""Keys behaviour the first real deploy needs: a key the role may not read does not stop the sweep, a root access
key is the most critical finding, and new or un-rotated secrets are checked at once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.stub import Stubber

from governor.domain.ports import ReadRefused
from governor.events.envelopes import CloudTrailRecord
from governor.keys.events import ROOT_USER, event_target
from governor.keys.explain import explain_record
from governor.keys.kms import KmsKeys
from governor.keys.resources import KmsKey, Secret
from governor.policy import parse_policy
from tests.unit.test_keys_domain import REPORT
from tests.unit.test_keys_handler import FIXTURES, FakeKms, FakeSecrets, cloudtrail, kms_key, schedule, world

DENIED = "User: arn:aws:sts::111122223333:assumed-role/keys/fn is not authorized to perform: kms:DescribeKey"


@dataclass
class LockedKms(FakeKms):
    """A key whose key policy does not delegate to IAM: DescribeKey is refused, as KMS does."""

    locked: set[str] = field(default_factory=set)
    list_refused: bool = False

    def key_ids(self) -> list[str]:
        if self.list_refused:
            raise ReadRefused("kms:ListKeys", "AccessDeniedException", "not authorized to perform: kms:ListKeys")
        return super().key_ids()

    def key(self, key_id: str) -> KmsKey | None:
        if key_id in self.locked:
            raise ReadRefused(key_id, "AccessDeniedException", DENIED)
        return super().key(key_id)


def _locked_world(**policy: Any) -> Any:
    w = world(**policy)
    locked = LockedKms(w.journal)
    w.adapters.kms = locked
    w.kms = locked
    return w


def test_a_key_the_role_may_not_read_is_a_finding_and_the_sweep_goes_on() -> None:
    w = _locked_world()
    w.kms.keys = {"locked": kms_key("locked"), "off": kms_key("off", rotation_enabled=False)}
    w.kms.locked = {"locked"}
    w.iam.report = REPORT
    w.secrets.items = {"s": Secret(arn="arn:aws:secretsmanager:us-east-1:111122223333:secret:s-a1b2c3", name="s")}
    result = w.run(schedule())
    assert result["status"] == "ok" and result["unreadable"] == 1
    assert w.iam.reports_read == 1, "the access-key sweep still ran"
    rules = [f.rule for f in w.sink.findings]
    assert "keys.unreadable" in rules and "keys.kms.rotation_off" in rules and "keys.secret.no_rotation" in rules
    unreadable = next(f for f in w.sink.findings if f.rule == "keys.unreadable")
    assert unreadable.resource == "locked" and "AccessDeniedException" in unreadable.title
    assert not w.dlq.messages


def test_a_refused_key_listing_still_lets_the_other_sweeps_run() -> None:
    w = _locked_world()
    w.kms.list_refused = True
    w.iam.report = REPORT
    result = w.run(schedule())
    assert result["status"] == "ok" and result["unreadable"] == 1 and w.iam.reports_read == 1
    assert [f.resource for f in w.sink.findings if f.rule == "keys.unreadable"] == ["kms:ListKeys"]


def test_the_kms_adapter_turns_access_denied_into_read_refused() -> None:
    client = boto3.client("kms", region_name="us-east-1")
    with Stubber(client) as stub:
        stub.add_client_error("describe_key", "AccessDeniedException", DENIED, 400, expected_params={"KeyId": "k1"})
        try:
            KmsKeys(kms=client).key("k1")
        except ReadRefused as refused:
            assert (refused.resource, refused.code) == ("k1", "AccessDeniedException")
        else:
            raise AssertionError("AccessDeniedException must become ReadRefused")


def _root_record() -> CloudTrailRecord:
    return CloudTrailRecord.model_validate(json.loads((FIXTURES / "create_access_key_root.json").read_text()))


def test_root_create_access_key_is_explained_as_critical() -> None:
    record = _root_record()
    assert event_target(record) is not None and event_target(record).resource_id == ROOT_USER  # type: ignore[union-attr]
    decision = explain_record(record, "aws.iam", parse_policy({}))
    assert (decision.verdict, decision.severity, decision.rule) == ("act", "critical", "keys.access_key.root")
    assert "root" in decision.reasons[0] and "AKIAI44QH8DHBEXAMPLE" in decision.reasons[0]


def test_root_create_access_key_event_sends_a_critical_finding_without_reading_iam() -> None:
    w = world()
    result = w.run(cloudtrail("create_access_key_root.json"))
    assert result["status"] == "ok" and w.iam.users_read == [] and w.iam.reports_read == 0
    (finding,) = w.sink.findings
    assert finding.severity == "critical" and finding.rule == "keys.access_key.root"


def test_an_iam_user_key_is_still_judged_by_its_age() -> None:
    record = CloudTrailRecord.model_validate(json.loads((FIXTURES / "create_access_key.json").read_text()))
    assert explain_record(record, "aws.iam", parse_policy({})).verdict == "ok"


def test_create_secret_and_cancel_rotation_are_checked_at_once() -> None:
    for name in ("CreateSecret", "CancelRotateSecret"):
        w = world()
        secret = Secret(
            arn="arn:aws:secretsmanager:us-west-2:111122223333:secret:training-db-a1b2c3", name="training-db"
        )
        assert isinstance(w.secrets, FakeSecrets)
        w.secrets.items = {secret.arn: secret}
        event = cloudtrail("rotate_secret.json", eventName=name)
        result = w.run(event)
        assert result["status"] == "ok" and result["resource"] == secret.arn
        assert [f.rule for f in w.sink.findings] == ["keys.secret.no_rotation"], name
        decision = explain_record(
            CloudTrailRecord.model_validate(event["detail"]), "aws.secretsmanager", w.runtime.policy
        )
        assert decision.verdict == "act" and decision.rule == "keys.secret.no_rotation", name
