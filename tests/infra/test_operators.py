"""The operator roles, proven on the synthesized statements: what ``gpu-admin`` and ``auditor`` can and cannot do."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import Stack

from infra.constructs.audit import AuditLake
from infra.constructs.operators import OperatorRoles
from infra.constructs.reports import Reports
from tests.infra.conftest import Synth
from tests.infra.policy_eval import ACCOUNT, REGION, RolePolicy, arn_of, role_policy

INSTANCE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
GROUP = f"arn:aws:ec2:{REGION}:{ACCOUNT}:security-group/sg-0123456789abcdef0"


def _logical_id(construct: Any) -> str:
    stack = Stack.of(construct)
    return str(stack.resolve(stack.get_logical_id(construct.node.default_child)))


def _one(synth: Synth, kind: type) -> Any:
    found = [c for c in synth.stack.node.find_all() if isinstance(c, kind)]
    assert len(found) == 1, f"expected one {kind.__name__}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def roles(synth: Synth) -> dict[str, Any]:
    operators = _one(synth, OperatorRoles)
    lake = _one(synth, AuditLake)
    reports = _one(synth, Reports)
    return {
        "admin": role_policy(synth.json, _logical_id(operators.gpu_admin)),
        "auditor": role_policy(synth.json, _logical_id(operators.auditor)),
        "ledger": arn_of(synth.json, _logical_id(synth.stack.shared.ledger)),
        "idempotency": arn_of(synth.json, _logical_id(synth.stack.shared.idempotency)),
        "key": arn_of(synth.json, _logical_id(synth.stack.shared.key)),
        "reports": arn_of(synth.json, _logical_id(reports.bucket)),
        "trail": arn_of(synth.json, _logical_id(lake.bucket)),
        "results": arn_of(synth.json, _logical_id(lake.results)),
        "workgroup": f"arn:aws:athena:{REGION}:{ACCOUNT}:workgroup/{lake.workgroup_name}",
        "table": f"arn:aws:glue:{REGION}:{ACCOUNT}:table/{lake.database_name}/{lake.table_name}",
    }


def test_roles_are_named_and_assumable_only_from_this_account(synth: Synth) -> None:
    operators = _one(synth, OperatorRoles)
    for role, name in ((operators.gpu_admin, "gpu-admin"), (operators.auditor, "auditor")):
        props = synth.json["Resources"][_logical_id(role)]["Properties"]
        # IAM names are global: the region keeps a second region's stack from colliding
        assert props["RoleName"] == {"Fn::Join": ["", [f"{synth.stack.stack_name}-{name}-", {"Ref": "AWS::Region"}]]}
        (trust,) = props["AssumeRolePolicyDocument"]["Statement"]
        principal = trust["Principal"]["AWS"]["Fn::Join"][1]
        assert {"Ref": "AWS::AccountId"} in principal and ":root" in principal
        assert "ManagedPolicyArns" not in props


@pytest.mark.parametrize("action", ["ec2:StartInstances", "ec2:StopInstances", "ec2:RebootInstances"])
@pytest.mark.parametrize(
    ("instance_type", "allowed"),
    [("g5.xlarge", True), ("p4d.24xlarge", True), ("trn1.32xlarge", True), ("m5.large", False), ("gr6.xlarge", False)],
)
def test_gpu_admin_schedules_gpu_instances_only(
    roles: dict[str, Any], action: str, instance_type: str, allowed: bool
) -> None:
    admin: RolePolicy = roles["admin"]
    assert admin.allows(action, INSTANCE, **{"ec2:InstanceType": instance_type}) is allowed
    assert not admin.allows(action, INSTANCE)  # without the instance-type key nothing matches


def test_gpu_admin_sets_only_governor_tags(roles: dict[str, Any]) -> None:
    admin: RolePolicy = roles["admin"]
    gpu = {"ec2:InstanceType": "g5.xlarge"}
    assert admin.allows("ec2:CreateTags", INSTANCE, **gpu, **{"aws:TagKeys": ["governor:snooze-until"]})
    assert admin.allows("ec2:DeleteTags", INSTANCE, **gpu, **{"aws:TagKeys": ["governor:exempt"]})
    assert not admin.allows("ec2:CreateTags", INSTANCE, **gpu, **{"aws:TagKeys": ["owner"]})
    assert not admin.allows("ec2:CreateTags", INSTANCE, **gpu, **{"aws:TagKeys": ["governor:exempt", "team"]})
    assert not admin.allows("ec2:DeleteTags", INSTANCE, **gpu)  # no tag keys in the request: not allowed
    assert not admin.allows(
        "ec2:CreateTags", INSTANCE, **{"ec2:InstanceType": "m5.large", "aws:TagKeys": ["governor:exempt"]}
    )


@pytest.mark.parametrize(
    ("action", "resource"),
    [
        ("ec2:TerminateInstances", INSTANCE),
        ("ec2:AuthorizeSecurityGroupIngress", GROUP),
        ("ec2:RevokeSecurityGroupIngress", GROUP),
        ("ec2:ModifyInstanceAttribute", INSTANCE),
        ("ec2:RunInstances", INSTANCE),
        ("kms:DisableKeyRotation", "key"),
        ("kms:ScheduleKeyDeletion", "key"),
        ("kms:PutKeyPolicy", "key"),
        ("kms:Decrypt", "key"),
        ("iam:CreateAccessKey", f"arn:aws:iam::{ACCOUNT}:user/alice"),
        ("iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/anything"),
        ("dynamodb:PutItem", "ledger"),
        ("dynamodb:DeleteItem", "ledger"),
        ("dynamodb:GetItem", "idempotency"),
        ("s3:PutObject", "reports"),
        ("s3:DeleteObject", "reports"),
        ("athena:StartQueryExecution", "workgroup"),
        ("secretsmanager:GetSecretValue", f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:governor/slack-webhook"),
    ],
)
def test_gpu_admin_cannot(roles: dict[str, Any], action: str, resource: str) -> None:
    target = roles.get(resource, resource)
    if resource in ("reports",):
        target = f"{roles['reports']}/reports/daily/2026-12-01.html"
    context = {"ec2:InstanceType": "g5.xlarge"} if action.startswith("ec2:") else {}
    assert not roles["admin"].allows(action, target, **context), f"gpu-admin may {action} on {target}"


def test_gpu_admin_reads_ledger_and_reports_through_the_key(roles: dict[str, Any]) -> None:
    admin: RolePolicy = roles["admin"]
    assert admin.allows("dynamodb:Query", roles["ledger"])
    assert admin.allows("dynamodb:Query", f"{roles['ledger']}/index/by-kind")
    assert admin.allows("dynamodb:GetItem", roles["ledger"])
    assert admin.allows("s3:GetObject", f"{roles['reports']}/reports/weekly/2026-11-30.html")
    assert admin.allows("s3:ListBucket", roles["reports"])
    via_dynamodb = {"kms:ViaService": f"dynamodb.{REGION}.amazonaws.com"}
    assert admin.allows("kms:Decrypt", roles["key"], **via_dynamodb)
    assert not admin.allows("kms:Decrypt", roles["key"], **{"kms:ViaService": f"ec2.{REGION}.amazonaws.com"})
    assert admin.allows("ec2:DescribeInstances")


def test_auditor_queries_the_lake_in_its_workgroup_only(roles: dict[str, Any]) -> None:
    auditor: RolePolicy = roles["auditor"]
    assert auditor.allows("athena:StartQueryExecution", roles["workgroup"])
    assert auditor.allows("athena:GetQueryResults", roles["workgroup"])
    assert not auditor.allows("athena:StartQueryExecution", f"arn:aws:athena:{REGION}:{ACCOUNT}:workgroup/primary")
    assert not auditor.allows("athena:UpdateWorkGroup", roles["workgroup"])
    assert auditor.allows("glue:GetTable", roles["table"])
    assert not auditor.allows("glue:DeleteTable", roles["table"])
    assert not auditor.allows("glue:GetTable", f"arn:aws:glue:{REGION}:{ACCOUNT}:table/other/secrets")
    assert auditor.allows(
        "s3:GetObject", f"{roles['trail']}/AWSLogs/{ACCOUNT}/CloudTrail/us-east-1/2026/12/01/x.json.gz"
    )
    assert not auditor.allows("s3:PutObject", f"{roles['trail']}/AWSLogs/x")
    assert auditor.allows("s3:PutObject", f"{roles['results']}/results/q-1.csv")
    assert not auditor.allows("s3:PutObject", f"{roles['results']}/elsewhere/q-1.csv")


def test_auditor_is_read_only_everywhere_else(roles: dict[str, Any]) -> None:
    auditor: RolePolicy = roles["auditor"]
    assert auditor.allows("dynamodb:Query", roles["ledger"])
    assert auditor.allows("s3:GetObject", f"{roles['reports']}/reports/daily/2026-12-01.html")
    for action, resource in [
        ("dynamodb:PutItem", roles["ledger"]),
        ("s3:PutObject", f"{roles['reports']}/reports/x"),
        ("ec2:StopInstances", INSTANCE),
        ("ec2:CreateTags", INSTANCE),
        ("ec2:DescribeInstances", "*"),
        ("kms:Decrypt", roles["key"]),
    ]:
        assert not auditor.allows(action, resource, **{"ec2:InstanceType": "g5.xlarge"}), action
    writes = {
        a
        for a in auditor.granted_actions()
        if not a.split(":", 1)[1].startswith(("Get", "List", "Describe", "BatchGet", "Query"))
    }
    # Athena runs queries and writes results with the caller's rights; KMS only through S3 and DynamoDB; nothing else.
    assert writes == {
        "athena:StartQueryExecution",
        "athena:StopQueryExecution",
        "s3:PutObject",
        "s3:AbortMultipartUpload",
        "kms:Decrypt",
        "kms:GenerateDataKey",
    }
