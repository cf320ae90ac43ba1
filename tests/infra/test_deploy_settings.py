"""Deploy-time settings: one template for the app, the tests and `cdk deploy`; one trail for a multi-region fleet;
the reserved-concurrency preflight; the layer without the runtime's own SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from infra.app_builder import build_app, project_context
from infra.build_layer import RUNTIME_PROVIDED, prune
from infra.constructs.audit import AuditLake
from infra.preflight import MIN_UNRESERVED, concurrency_problem
from infra.settings import CDK_JSON, Settings, SettingsError
from tests.conftest import ROOT
from tests.infra.conftest import Synth


def test_the_app_loads_cdk_json_context_like_the_cli() -> None:
    context = json.loads(CDK_JSON.read_text())["context"]
    assert project_context() == context | project_context()  # cdk.json first, cdk.context.json on top
    app, stack = build_app()
    for key, value in context.items():
        assert app.node.try_get_context(key) == value, key
    assert stack.stack_name == context["stack_name"]


def test_explicit_context_overrides_cdk_json() -> None:
    """-c values reach app.py in CDK_CONTEXT_JSON (test_a_bad_context_... shows that path); callers pass ``context``."""
    app, stack = build_app(context={"stack_name": "GovStaging"})
    assert stack.stack_name == "GovStaging"
    assert app.node.try_get_context("@aws-cdk/aws-iam:minimizePolicies") is True  # still from cdk.json


def _without_layer_asset(template: dict[str, object]) -> dict[str, object]:
    """The template with the dependency layers' assets (content and description) left out."""
    copy = json.loads(json.dumps(template))
    for resource in copy["Resources"].values():
        if resource["Type"] == "AWS::Lambda::LayerVersion":
            resource["Properties"].pop("Content")
            resource["Properties"].pop("Description")
            resource.get("Metadata", {}).pop("aws:asset:path", None)
    return copy


def test_python_app_py_writes_the_template_the_tests_check(synth: Synth, tmp_path: Path) -> None:
    """`cdk deploy` runs `python3 app.py` with cdk.json's context in CDK_CONTEXT_JSON; so does this test.

    app.py synthesizes only with a verified layer build (``make layer``'s own code over small stand-in wheels here);
    the tests' synth uses placeholder layers. Everything but the layers' assets is the same.
    """
    from tests.layer_builds import stand_in_build

    build = tmp_path / "build"
    stand_in_build(build)
    context = json.loads(CDK_JSON.read_text())["context"] | {"layer_build": str(build)}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env |= {"CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path / "out")}
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    deployed = json.loads((tmp_path / "out" / f"{synth.stack.stack_name}.template.json").read_text())
    assert deployed != synth.json  # the real layers' assets differ from the placeholder's
    assert _without_layer_asset(deployed) == _without_layer_asset(synth.json)


def test_audit_region_needs_the_stack_region() -> None:
    with pytest.raises(SettingsError, match="-c region="):
        Settings.from_context({"audit_region": "us-east-1"}.get)


def test_only_the_audit_region_holds_the_trail() -> None:
    _, regional = build_app(context={"region": "eu-west-1", "audit_region": "us-east-1"})
    assert regional.audit is None and not [c for c in regional.node.find_all() if isinstance(c, AuditLake)]
    assert regional.functions.keys() >= {"keys", "network", "idle", "spot", "lifecycle", "notifier", "report"}
    _, home = build_app(context={"region": "us-east-1", "audit_region": "us-east-1"})
    assert home.audit is not None and home.audit.trail is not None


def test_a_bad_context_stops_the_synth_in_one_line(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "CDK_CONTEXT_JSON": '{"audit_region": "us-east-1"}', "CDK_OUTDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "audit_region" in done.stderr


def _settings(unreserved: int, total: int = 1000) -> dict[str, object]:
    """GetAccountSettings as Lambda returns it."""
    return {
        "AccountLimit": {
            "TotalCodeSize": 80530636800,
            "CodeSizeUnzipped": 262144000,
            "CodeSizeZipped": 52428800,
            "ConcurrentExecutions": total,
            "UnreservedConcurrentExecutions": unreserved,
        },
        "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0},
    }


@pytest.mark.parametrize(
    ("unreserved", "reserved", "fits"), [(1000, 5, True), (105, 5, True), (104, 5, False), (10, 5, False)]
)
def test_reserved_concurrency_preflight(unreserved: int, reserved: int, fits: bool) -> None:
    client = boto3.client("lambda", region_name="us-east-1")
    with Stubber(client) as stub:
        stub.add_response("get_account_settings", _settings(unreserved, max(unreserved, 10)))
        problem = concurrency_problem(client, reserved)
    assert (problem is None) is fits
    if problem:
        assert str(MIN_UNRESERVED) in problem and "spot.reserved_concurrency" in problem


def test_the_layer_leaves_boto3_and_botocore_to_the_runtime(tmp_path: Path) -> None:
    site = tmp_path / "python"
    for name in (
        "botocore",
        "botocore-1.42.0.dist-info",
        "boto3",
        "boto3-1.42.0.dist-info",
        "s3transfer",
        "s3transfer-0.14.0.dist-info",
        "aws_xray_sdk",
        "aws_xray_sdk-2.14.0.dist-info",
        "aws_lambda_powertools",
        "jmespath",
        "pydantic",
    ):
        (site / name).mkdir(parents=True)
    removed = prune(site)
    assert sorted(p.name for p in site.iterdir()) == [
        "aws_lambda_powertools",
        "aws_xray_sdk",
        "aws_xray_sdk-2.14.0.dist-info",
        "jmespath",
        "pydantic",
    ]
    assert len(removed) == 6 and set(RUNTIME_PROVIDED) == {"boto3", "botocore", "s3transfer"}


def test_no_china_partition_is_claimed() -> None:
    assert json.loads(CDK_JSON.read_text())["context"]["@aws-cdk/core:target-partitions"] == ["aws"]


def test_a_deprecated_policy_key_is_a_synth_warning_on_the_stack(tmp_path: Path) -> None:
    """``cdk synth`` prints the stack's warnings: a price key at its old place (lifecycle) is read at its new one
    (pricing), and the synth says so once per key; the functions' environments hold the new shape."""
    from aws_cdk.assertions import Annotations, Match

    old = tmp_path / "old.yaml"
    old.write_text("lifecycle:\n  prices:\n    g5.xlarge: {on_demand: 2.0, gpus: 1}\n")
    _, stack = build_app(policy_file=old)
    [warning] = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("deprecated"))
    assert (
        warning.entry.data == "lifecycle.prices is deprecated: move it to pricing.prices [ack: governor:policy-warning]"
    )
    assert stack.policy.pricing.prices["g5.xlarge"].on_demand == 2.0
