"""Deploy rehearsal: the synthesized template, published the way ``cdk deploy`` publishes it, created on moto's
CloudFormation (a ThreadedMotoServer on the loopback interface) until CREATE_COMPLETE.

The Lambda code asset is stubbed (a small zip at the asset's key in the bootstrap bucket) and the bootstrap version
parameter is set, as ``cdk bootstrap`` would. Resource types moto's CloudFormation cannot create are listed here,
by name, so nothing is skipped silently: the test fails when the template gains a type moto skips that is not listed
(decide whether it needs another check) or when moto learns to create a listed one (remove it).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.infra.conftest import Synth

ACCOUNT, REGION = "123456789012", "us-east-1"
QUALIFIER = "hnb659fds"  # the CDK default bootstrap qualifier
#: Types in our template that moto's CloudFormation does not implement (it skips them with a warning), with why the
#: rest of the suite still covers them.
MOTO_CANNOT_CREATE: dict[str, str] = {
    "AWS::Athena::NamedQuery": "queries are checked by tests/unit/test_queries_athena.py (Trino parse, parameters)",
    "AWS::Athena::WorkGroup": "properties asserted in tests/infra/test_audit.py; cfn-lint checks the schema",
    "AWS::CloudTrail::Trail": "properties asserted in tests/infra/test_audit.py; cfn-lint checks the schema",
    "AWS::CloudWatch::Alarm": "every function's alarms asserted in tests/infra/test_foundation.py; cfn-lint schema",
    "AWS::Events::EventBusPolicy": "statements asserted in tests/infra/test_trust_boundaries.py, validated in test_sar.py",
    "AWS::Glue::Database": "the name and catalog asserted in tests/infra/test_audit.py; cfn-lint checks the schema",
    "AWS::S3::BucketPolicy": "statements validated against the SAR in tests/infra/test_sar.py",
    "AWS::SQS::QueuePolicy": "TLS-only statements asserted in test_foundation.py and validated in test_sar.py",
    "AWS::Glue::Table": "the columns and projection are asserted in tests/infra/test_audit.py",
    "AWS::Lambda::EventInvokeConfig": "asserted per function in tests/infra/test_foundation.py",
    "AWS::SNS::TopicPolicy": "statements validated against the SAR in tests/infra/test_sar.py",
    "AWS::Scheduler::Schedule": "targets and DLQs asserted in tests/infra capability tests",
    "AWS::Lambda::Url": "auth type NONE and the SlackInteractivityUrl output asserted in tests/infra/test_interactions.py",
}
#: Types moto implements but fails on for a valid template; the rehearsal removes them (nothing refers to them)
#: from the copy it deploys, and says why.
MOTO_FAILS_ON: dict[str, str] = {
    "AWS::Events::Archive": "moto's Archive model json.loads() an EventPattern that CloudFormation accepts as an "
    "object (and generates names over 48 characters); asserted in tests/infra/test_foundation.py",
}


#: moto services behind the template's resource types. moto imports a service's CloudFormation models only when the
#: service is first used and caches the type map on first use, so they are loaded up front for a stable answer.
MOTO_SERVICES = (
    "athena", "cloudtrail", "cloudwatch", "dynamodb", "events", "glue", "iam", "kms", "lambda", "logs", "s3",
    "scheduler", "sns", "sqs", "ssm",
)  # fmt: skip


def _load_moto_models() -> None:
    from moto.backends import get_backend
    from moto.cloudformation import parsing

    for service in MOTO_SERVICES:
        get_backend(service)  # type: ignore[call-overload]
    parsing.get_model_list.cache_clear()
    parsing.get_model_map.cache_clear()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    from moto.moto_api._internal.models import moto_api_backend

    # moto's accounts live in the process: a demo run earlier in this test worker leaves its "governor" bus behind,
    # and CreateStack would then fail on it. The rehearsal starts from an empty account, as the demo does.
    moto_api_backend.reset()
    _load_moto_models()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        yield url
    finally:
        server.stop()


def _client(service: str, endpoint: str) -> Any:
    """A client of the emulator; explicit fake credentials (module fixtures run before the per-test ones)."""
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _stub_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("governor/__init__.py", "")
    return buffer.getvalue()


def _bootstrap_and_publish(synth: Synth, endpoint: str) -> str:
    """What ``cdk bootstrap`` and the asset publishing step of ``cdk deploy`` leave behind; returns the template URL."""
    s3 = _client("s3", endpoint)
    bucket = f"cdk-{QUALIFIER}-assets-{ACCOUNT}-{REGION}"
    s3.create_bucket(Bucket=bucket)
    _client("ssm", endpoint).put_parameter(Name=f"/cdk-bootstrap/{QUALIFIER}/version", Value="30", Type="String")
    manifest = json.loads((synth.outdir / f"{synth.stack.stack_name}.assets.json").read_text())
    template = rehearsal_template(synth.json)
    template_url = ""
    for asset in manifest["files"].values():
        for destination in asset["destinations"].values():
            key = destination["objectKey"]
            if asset["source"]["packaging"] == "zip":
                body = _stub_zip()
            else:
                body = json.dumps(template).encode()
                template_url = f"https://s3.{REGION}.amazonaws.com/{bucket}/{key}"  # as the CDK CLI passes it
            s3.put_object(Bucket=bucket, Key=key, Body=body)
    assert template_url, "the template is published as a file asset (it is larger than 51,200 bytes)"
    return template_url


def rehearsal_template(template: dict[str, Any]) -> dict[str, Any]:
    """The synthesized template less the resources of MOTO_FAILS_ON (which must have no dependents), and with
    ``{"Ref": <EventBus>}`` written as the bus name, which is what CloudFormation's Ref returns for a bus (moto
    hands the rule its bus object instead and fails)."""
    kept = {k: v for k, v in template["Resources"].items() if v["Type"] not in MOTO_FAILS_ON}
    removed = set(template["Resources"]) - set(kept)
    # moto validates every Output's Fn::GetAtt against its own models and crashes on a type it lacks (Lambda::Url)
    lacking = {k for k, v in kept.items() if v["Type"] in MOTO_CANNOT_CREATE}
    outputs = {
        k: v
        for k, v in template.get("Outputs", {}).items()
        if not (isinstance(v["Value"], dict) and v["Value"].get("Fn::GetAtt", [None])[0] in lacking)
    }
    text = json.dumps({**template, "Resources": kept, "Outputs": outputs})
    referenced = sorted(r for r in removed if f'"{r}"' in text)
    assert not referenced, f"removed for moto but referred to: {referenced}"
    for logical_id, resource in kept.items():
        if resource["Type"] == "AWS::Events::EventBus":
            text = text.replace(json.dumps({"Ref": logical_id}), json.dumps(resource["Properties"]["Name"]))
    rehearsed: dict[str, Any] = json.loads(text)
    return rehearsed


@pytest.fixture(scope="module")
def deployed(synth: Synth, endpoint: str) -> dict[str, Any]:
    template_url = _bootstrap_and_publish(synth, endpoint)
    cloudformation = _client("cloudformation", endpoint)
    cloudformation.create_stack(
        StackName=synth.stack.stack_name,
        TemplateURL=template_url,
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    waiter = cloudformation.get_waiter("stack_create_complete")
    waiter.wait(StackName=synth.stack.stack_name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    stack = cloudformation.describe_stacks(StackName=synth.stack.stack_name)["Stacks"][0]
    paginator = cloudformation.get_paginator("list_stack_resources")
    resources = [
        r for page in paginator.paginate(StackName=synth.stack.stack_name) for r in page["StackResourceSummaries"]
    ]
    return {"stack": stack, "resources": resources}


def test_the_template_reaches_create_complete(deployed: dict[str, Any]) -> None:
    assert deployed["stack"]["StackStatus"] == "CREATE_COMPLETE", deployed["stack"].get("StackStatusReason")


def test_every_resource_moto_can_create_was_created(synth: Synth, deployed: dict[str, Any]) -> None:
    from moto.cloudformation.parsing import resource_class_from_type

    in_template = Counter(r["Type"] for r in synth.json["Resources"].values())
    unsupported = {kind for kind in in_template if resource_class_from_type(kind) is None}
    assert not unsupported & set(MOTO_FAILS_ON)
    listed = set(MOTO_CANNOT_CREATE)
    if not synth.stack.policy.interactions.buttons:
        listed.discard("AWS::Lambda::Url")  # the public Slack endpoint exists only while buttons are on (issue 33)
    assert unsupported == listed, (
        f"not created by moto but not listed: {sorted(unsupported - listed)}; "
        f"listed but now created: {sorted(listed - unsupported)}"
    )
    created = Counter(r["ResourceType"] for r in deployed["resources"] if r["ResourceStatus"] == "CREATE_COMPLETE")
    for kind, count in in_template.items():
        if kind not in MOTO_CANNOT_CREATE and kind not in MOTO_FAILS_ON:
            assert created[kind] == count, f"{kind}: {created[kind]} of {count} created"


def test_the_stack_outputs_what_operators_need(deployed: dict[str, Any]) -> None:
    outputs = {o["OutputKey"]: o["OutputValue"] for o in deployed["stack"].get("Outputs", [])}
    assert outputs["AlarmTopicArn"].startswith(f"arn:aws:sns:{REGION}:{ACCOUNT}:")
    assert outputs["LedgerTableName"] and outputs["AuditWorkGroup"] == "GpuFleetGovernor-audit"


def test_the_created_roles_carry_region_unique_names(endpoint: str, deployed: dict[str, Any]) -> None:
    names = {r["RoleName"] for r in _client("iam", endpoint).list_roles()["Roles"]}
    assert {f"GpuFleetGovernor-gpu-admin-{REGION}", f"GpuFleetGovernor-auditor-{REGION}"} <= names
