"""The trust boundaries in the synthesized template: SendCommand scoped by tag, the bus closed to all but the stack's
functions, the key usable by services only for this account, the archive on the project key, the trail bucket and
key for this stack's trail only."""

from __future__ import annotations

import json
from typing import Any

from governor.policy import Policy
from tests.infra.conftest import Synth


def _statements(synth: Synth, kind: str, document: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for resource in synth.resources(kind).values():
        statements = resource["Properties"][document]["Statement"]
        found.extend(statements)
    return found


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_send_command_is_one_document_and_only_instances_carrying_the_fleet_tags(synth: Synth) -> None:
    sends = [
        s
        for s in _statements(synth, "AWS::IAM::Policy", "PolicyDocument")
        if "ssm:SendCommand" in _as_list(s["Action"])
    ]
    assert sends, "idle and spot roles send checkpoint commands"
    fleet_tags = Policy().fleet.fleet_tags
    documents = [s for s in sends if "document/" in json.dumps(s["Resource"])]
    instances = [s for s in sends if "instance/" in json.dumps(s["Resource"])]
    assert len(documents) == 2 and len(instances) == 2  # one of each per role (idle, spot)
    for statement in documents:
        assert json.dumps(statement["Resource"]).count("document/AWS-RunShellScript") == 1
        assert "instance/" not in json.dumps(statement["Resource"])
    for statement in instances:
        assert statement["Condition"] == {"StringEquals": {f"ssm:resourceTag/{k}": v for k, v in fleet_tags.items()}}
        assert "document/" not in json.dumps(statement["Resource"])


def test_only_the_stacks_function_roles_may_put_events_on_the_governor_bus(synth: Synth) -> None:
    policies = synth.resources("AWS::Events::EventBusPolicy")
    statements = [p["Properties"]["Statement"] for p in policies.values()]
    deny = next(s for s in statements if s.get("Effect") == "Deny")
    assert deny["Action"] == "events:PutEvents" and deny["Principal"] == {"AWS": "*"}
    allowed = deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
    roles = {r["Fn::GetAtt"][0] for r in allowed}
    functions = [
        f
        for f in synth.resources("AWS::Lambda::Function").values()
        if f["Properties"]["Handler"].startswith("governor.")
    ]
    assert roles == {f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions}


def test_service_principals_use_the_key_only_for_this_account(synth: Synth) -> None:
    key = next(iter(synth.resources("AWS::KMS::Key").values()))
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    services = [s for s in statements if "Service" in s.get("Principal", {})]
    assert services
    for statement in services:
        service = statement["Principal"]["Service"]
        condition = json.dumps(statement.get("Condition", {}))
        if service == "cloudtrail.amazonaws.com":
            assert "aws:SourceArn" in condition
        elif str(service).startswith("logs.") or "logs." in json.dumps(service):
            assert "kms:EncryptionContext:aws:logs:arn" in condition
        else:
            assert "aws:SourceAccount" in condition and "aws:SourceArn" in condition, service


def test_the_bus_archive_uses_the_project_key(synth: Synth) -> None:
    (archive,) = synth.resources("AWS::Events::Archive").values()
    assert "SharedKey" in json.dumps(archive["Properties"]["KmsKeyIdentifier"])


def test_only_this_stacks_trail_may_write_to_the_trail_bucket(synth: Synth) -> None:
    buckets = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for k, p in synth.resources("AWS::S3::BucketPolicy").items()
        if "AuditTrailBucket" in k
    ]
    (statements,) = buckets
    deny = next(s for s in statements if s.get("Sid") == "OnlyThisStacksTrail")
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"Service": "cloudtrail.amazonaws.com"}
    assert set(deny["Action"]) == {"s3:GetBucketAcl", "s3:PutObject"}
    arn = json.dumps(deny["Condition"]["StringNotEquals"]["aws:SourceArn"])
    assert "trail/" in arn and "-trail" in arn


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_the_bus_key_lists_describe_key_only_where_aws_can_match_it(synth: Synth) -> None:
    """Issue 45.9: CDK's bus statement listed DescribeKey under an encryption-context condition DescribeKey never
    carries; the grant read as real and was not. EventBridge still encrypts the bus and verifies its key."""
    (bus,) = synth.resources("AWS::Events::EventBus").values()
    assert "SharedKey" in json.dumps(bus["Properties"]["KmsKeyIdentifier"])
    key = next(iter(synth.resources("AWS::KMS::Key").values()))
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    contextual = [s for s in statements if "kms:EncryptionContext" in json.dumps(s.get("Condition", {}))]
    assert contextual and not [s for s in contextual if "kms:DescribeKey" in _as_list(s["Action"])]
    events = [s for s in statements if s.get("Principal", {}).get("Service") == "events.amazonaws.com"]
    bus_use = [s for s in events if "kms:EncryptionContext:aws:events:event-bus:arn" in json.dumps(s["Condition"])]
    assert bus_use and {"kms:Decrypt", "kms:GenerateDataKey"} <= set(_as_list(bus_use[0]["Action"]))
    assert [s for s in events if _as_list(s["Action"]) == ["kms:DescribeKey"]]  # verified by its own statement
