"""KMS, IAM and Secrets Manager adapters on moto, plus botocore's Stubber for the AWS answers moto does not give
(``RotationPeriodInDays``, the on-demand limit, a credential report still being generated)."""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from governor.keys.domain import decide_kms_key
from governor.keys.iam_keys import CredentialReportTimeout, IamAccessKeys
from governor.keys.kms import KmsKeys
from governor.keys.resources import Secret, parse_credential_report
from governor.keys.secrets import SecretsRotation
from governor.policy import parse_policy

REGION = "us-east-1"


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws(config={"lambda": {"use_docker": False}}):
        yield


def rotation_function() -> str:
    """A rotation Lambda in moto (never run: moto stubs invocations without Docker)."""
    role = boto3.client("iam").create_role(RoleName="rotator", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return {}\n")
    function = boto3.client("lambda", region_name=REGION).create_function(
        FunctionName="rotate-training-db",
        Runtime="python3.12",
        Role=role,
        Handler="index.handler",
        Code={"ZipFile": buffer.getvalue()},
    )
    return str(function["FunctionArn"])


# KMS -----------------------------------------------------------------------------------------------------------


def test_kms_reads_keys_and_enables_rotation_with_a_period(aws: None) -> None:
    kms = boto3.client("kms", region_name=REGION)
    plain = kms.create_key(Description="training data")["KeyMetadata"]["KeyId"]
    signing = kms.create_key(KeySpec="RSA_2048", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["KeyId"]
    kms.tag_resource(KeyId=plain, Tags=[{"TagKey": "owner", "TagValue": "vision-team"}])
    adapter = KmsKeys(REGION)
    assert set(adapter.key_ids()) == {plain, signing}
    key = adapter.key(plain)
    assert key is not None and key.rotates_automatically and key.rotation_enabled is False
    assert adapter.tags(plain) == {"owner": "vision-team"}
    assert adapter.enable_rotation(plain, 90).ok
    again = adapter.key(plain)
    assert again is not None and again.rotation_enabled is True
    # moto does not echo RotationPeriodInDays (AWS does); the period logic is covered with Stubber below and in
    # tests/unit/test_keys_domain.py.
    assert again.rotation_period_days is None
    asymmetric = adapter.key(signing)
    assert asymmetric is not None and not asymmetric.rotates_automatically and asymmetric.created is not None
    assert adapter.key("00000000-0000-0000-0000-000000000000") is None


def test_kms_on_demand_rotation_shows_as_last_rotation(aws: None) -> None:
    kms = boto3.client("kms", region_name=REGION)
    key_id = kms.create_key()["KeyMetadata"]["KeyId"]
    adapter = KmsKeys(REGION)
    assert adapter.rotate_on_demand(key_id).ok
    last, on_demand = adapter._rotations(key_id)
    assert last is not None and on_demand == 1


def stubbed_kms() -> tuple[KmsKeys, Stubber]:
    client = boto3.client("kms", region_name=REGION)
    return KmsKeys(REGION, kms=client), Stubber(client)


def test_kms_reads_the_rotation_period_aws_reports() -> None:
    adapter, stub = stubbed_kms()
    key_id = "1234abcd-12ab-34cd-56ef-1234567890ab"
    created = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    stub.add_response(
        "describe_key",
        {
            "KeyMetadata": {
                "KeyId": key_id,
                "Arn": f"arn:aws:kms:us-east-1:111122223333:key/{key_id}",
                "CreationDate": created,
                "KeyManager": "CUSTOMER",
                "KeyState": "Enabled",
                "KeySpec": "SYMMETRIC_DEFAULT",
                "Origin": "AWS_KMS",
            }
        },
        {"KeyId": key_id},
    )
    stub.add_response(
        "get_key_rotation_status",
        {
            "KeyRotationEnabled": True,
            "KeyId": key_id,
            "RotationPeriodInDays": 365,
            "NextRotationDate": dt.datetime(2026, 12, 20, tzinfo=dt.UTC),
        },
        {"KeyId": key_id},
    )
    with stub:
        key = adapter.key(key_id)
    assert key is not None and key.rotation_period_days == 365
    decision = decide_kms_key(key, parse_policy({}), dt.datetime(2026, 12, 1, tzinfo=dt.UTC))
    assert decision.rule == "keys.kms.rotation_period_too_long"


def test_kms_refusals_are_outcomes() -> None:
    adapter, stub = stubbed_kms()
    stub.add_client_error(
        "rotate_key_on_demand", "LimitExceededException", "You've reached the on-demand rotation limit."
    )
    stub.add_client_error("enable_key_rotation", "UnsupportedOperationException", "Imported key material.")
    with stub:
        limit = adapter.rotate_on_demand("k")
        unsupported = adapter.enable_rotation("k", 90)
    assert limit.ok is False and limit.error_code == "LimitExceededException"
    assert unsupported.error_code == "UnsupportedOperationException"


# IAM -----------------------------------------------------------------------------------------------------------


def test_credential_report_lists_all_users_and_keys_can_be_deactivated(aws: None) -> None:
    iam = boto3.client("iam")
    for user in ("alice", "bob", "carol"):
        iam.create_user(UserName=user, Tags=[{"Key": "owner", "Value": f"{user}@example.com"}])
    created = iam.create_access_key(UserName="alice")["AccessKey"]["AccessKeyId"]
    iam.create_access_key(UserName="bob")
    adapter = IamAccessKeys(sleep=lambda _: None)
    rows = parse_credential_report(adapter.credential_report())
    assert sorted(r.user for r in rows) == ["alice", "bob"] and all(r.active for r in rows)
    [key] = adapter.user_keys("alice")
    assert key.key_id == created and key.tags == {"owner": "alice@example.com"} and key.created is not None
    assert adapter.deactivate("alice", created).ok
    assert adapter.user_keys("alice")[0].active is False
    assert adapter.user_keys("nobody") == []
    assert adapter.deactivate("nobody", created).error_code == "NoSuchEntity"


def test_credential_report_waits_while_it_is_generated_without_real_sleep() -> None:
    client = boto3.client("iam")
    slept: list[float] = []
    adapter = IamAccessKeys(iam=client, sleep=slept.append, delay_seconds=2.0, attempts=3)
    stub = Stubber(client)
    stub.add_response("generate_credential_report", {"State": "STARTED"})
    stub.add_client_error("get_credential_report", "ReportInProgress", "Report is being generated.")
    stub.add_response("generate_credential_report", {"State": "COMPLETE"})
    stub.add_response("get_credential_report", {"Content": b"user,arn\n", "ReportFormat": "text/csv"})
    with stub:
        assert adapter.credential_report() == "user,arn\n"
    assert slept == [2.0]
    for _ in range(3):
        stub.add_response("generate_credential_report", {"State": "INPROGRESS"})
        stub.add_client_error("get_credential_report", "ReportInProgress", "Report is being generated.")
    with stub, pytest.raises(CredentialReportTimeout):
        adapter.credential_report()


# Secrets Manager -----------------------------------------------------------------------------------------------


def test_secrets_list_describe_and_set_the_schedule_keeping_the_function(aws: None) -> None:
    sm = boto3.client("secretsmanager", region_name=REGION)
    function = rotation_function()
    slow = sm.create_secret(Name="training-db", SecretString="s3cr3t", Tags=[{"Key": "team", "Value": "ml"}])["ARN"]
    sm.rotate_secret(
        SecretId=slow,
        RotationLambdaARN=function,
        RotationRules={"AutomaticallyAfterDays": 365},
        RotateImmediately=False,
    )
    sm.create_secret(Name="api-token", SecretString="t0ken")
    adapter = SecretsRotation(REGION)
    listed = {s.name: s for s in adapter.secrets()}
    assert set(listed) == {"training-db", "api-token"}
    assert listed["training-db"].rotation_enabled and listed["training-db"].lambda_arn == function
    assert listed["training-db"].rules == {"AutomaticallyAfterDays": 365} and listed["training-db"].tags == {
        "team": "ml"
    }
    assert listed["api-token"].rotation_enabled is False and listed["api-token"].lambda_arn is None
    secret = adapter.secret("training-db")
    assert secret is not None and secret.arn == slow
    assert adapter.set_rotation(secret, {"AutomaticallyAfterDays": 90}).ok
    after = sm.describe_secret(SecretId=slow)
    assert after["RotationRules"] == {"AutomaticallyAfterDays": 90} and after["RotationLambdaARN"] == function
    assert adapter.secret("missing") is None


def test_secret_refusal_is_an_outcome() -> None:
    client = boto3.client("secretsmanager", region_name=REGION)
    adapter = SecretsRotation(REGION, secretsmanager=client)
    stub = Stubber(client)
    params: dict[str, Any] = {
        "SecretId": "arn:s",
        "RotationRules": {"AutomaticallyAfterDays": 90},
        "RotateImmediately": False,
    }
    stub.add_client_error(
        "rotate_secret", "InvalidRequestException", "A previous rotation isn't complete.", expected_params=params
    )
    with stub:
        outcome = adapter.set_rotation(Secret(arn="arn:s", name="s"), {"AutomaticallyAfterDays": 90})
    assert outcome.error_code == "InvalidRequestException"
