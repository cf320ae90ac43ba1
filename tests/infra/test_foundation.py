"""The shared stack: encrypted stores, bus and archive, and every function built the same safe way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match

from governor.policy import PolicyError, parse_policy
from infra.app_builder import build_app
from tests.conftest import ROOT
from tests.infra.conftest import Synth


def test_kms_key_rotates_at_most_every_90_days(synth: Synth) -> None:
    synth.template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True, "RotationPeriodInDays": 90})


def test_ledger_is_on_demand_pitr_kms_ttl(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "BillingMode": "PAY_PER_REQUEST",
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "SSESpecification": {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": Match.any_value()},
            "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
        },
    )


def test_every_table_queue_topic_and_log_group_is_encrypted(synth: Synth) -> None:
    for table in synth.resources("AWS::DynamoDB::Table").values():
        assert table["Properties"]["SSESpecification"]["SSEType"] == "KMS"
    for queue in synth.resources("AWS::SQS::Queue").values():
        assert "KmsMasterKeyId" in queue["Properties"]
    for topic in synth.resources("AWS::SNS::Topic").values():
        assert "KmsMasterKeyId" in topic["Properties"]
    for group in synth.resources("AWS::Logs::LogGroup").values():
        assert "KmsKeyId" in group["Properties"] and "RetentionInDays" in group["Properties"]


def test_governor_bus_and_archive(synth: Synth) -> None:
    synth.template.has_resource_properties("AWS::Events::EventBus", {"Name": "governor"})
    synth.template.has_resource_properties(
        "AWS::Events::Archive", {"EventPattern": {"source": ["gpu-fleet-governor"]}, "RetentionDays": 400}
    )


def _ref_id(value: Any) -> str | None:
    if isinstance(value, dict):
        if "Fn::GetAtt" in value:
            return value["Fn::GetAtt"][0]
        if "Ref" in value:
            return value["Ref"]
    return None


def test_every_function_is_arm64_traced_json_logged_with_dlq_and_alarms(synth: Synth) -> None:
    functions = synth.resources("AWS::Lambda::Function")
    invoke_configs = synth.resources("AWS::Lambda::EventInvokeConfig")
    alarms = synth.resources("AWS::CloudWatch::Alarm")
    for logical_id, function in functions.items():
        props = function["Properties"]
        assert props["Architectures"] == ["arm64"], logical_id
        assert props["Runtime"].startswith("python3."), logical_id
        assert props["TracingConfig"]["Mode"] == "Active", logical_id
        assert props["LoggingConfig"]["LogFormat"] == "JSON", logical_id
        assert "GOVERNOR_POLICY" in props["Environment"]["Variables"], logical_id
        config = [c for c in invoke_configs.values() if _ref_id(c["Properties"]["FunctionName"]) == logical_id]
        assert config and "OnFailure" in config[0]["Properties"]["DestinationConfig"], logical_id
        alarm_targets = [a for a in alarms.values() if "Dimensions" in a["Properties"]]
        assert any(_ref_id(d["Value"]) == logical_id for a in alarm_targets for d in a["Properties"]["Dimensions"]), (
            f"{logical_id} has no error alarm"
        )


def test_every_queue_is_tls_only(synth: Synth) -> None:
    policies = synth.resources("AWS::SQS::QueuePolicy")
    queues = set(synth.resources("AWS::SQS::Queue"))
    secured = set()
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false":
                secured.update(_ref_id(q) for q in policy["Properties"]["Queues"])
    assert queues <= secured


def test_nag_report_is_clean(synth: Synth) -> None:
    report = (synth.outdir / "validation-report.json").read_text()
    assert '"status": "failure"' not in report.lower()


def test_template_passes_cfn_lint_without_errors(synth: Synth) -> None:
    """Every documented environment's template and spoke are linted in test_deploy_environments.py; this one is the
    default synth the other infra tests read."""
    from tests.infra.cfn_lint import lint, open_errors

    assert open_errors(lint([synth.outdir / f"{synth.stack.stack_name}.template.json"])) == []


def test_bad_policy_stops_synth_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "governor.yaml"
    bad.write_text("idle:\n  enforec: true\n")
    done = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "CDK_CONTEXT_JSON": f'{{"policy_file": "{bad}"}}',
            "CDK_OUTDIR": str(tmp_path / "o"),
        },
        check=False,
    )
    assert done.returncode == 2
    assert "idle.enforec" in done.stderr and str(bad) in done.stderr
    assert "Traceback" not in done.stderr


def test_a_policy_too_large_for_lambda_environment_stops_the_synth() -> None:
    prices = {f"g5.{n}xlarge": {"on_demand": 1.0 + n, "spot": 0.5, "gpus": 1} for n in range(200)}
    policy = parse_policy({"pricing": {"prices": prices}})
    with pytest.raises(PolicyError, match=r"bytes for the (lifecycle|report|idle) function; Lambda allows 4 KB"):
        build_app(policy=policy)


def _namespace_teams(entries: int) -> dict[str, object]:
    teams = {f"n{index:03d}": f"t{index % 10}" for index in range(entries)}
    cluster = {"name": "gpu-prod", "metric_source": "container_insights", "namespace_teams": teams}
    return {"idle": {"clusters": [cluster]}}


def test_the_environment_is_counted_as_lambda_counts_it_escapes_included() -> None:
    """Lambda counts the variables as JSON: GOVERNOR_POLICY is JSON inside a JSON string, so each of its quotes costs an
    escape byte. 240 namespace_teams entries take 3,016 raw bytes (the old 3,072-byte policy budget let them through)
    but 4,400 as Lambda counts the idle function's environment: Lambda would refuse the deploy."""
    policy = parse_policy(_namespace_teams(240))
    with pytest.raises(PolicyError, match=r"bytes for the idle function; Lambda allows 4 KB") as raised:
        build_app(policy=policy)
    assert "as Lambda counts them (its variables as JSON, escapes included)" in str(raised.value)
    from infra.environment import ENVIRONMENT_LIMIT, environment_sizes

    _, stack = build_app(policy=parse_policy(_namespace_teams(200)))  # 3,767 bytes as JSON: it fits
    total, shares = environment_sizes(stack.functions["idle"].function)
    assert total <= ENVIRONMENT_LIMIT and shares["GOVERNOR_POLICY"] > 3000


def test_a_function_s_environment_parses_back_to_its_sections_of_the_policy() -> None:
    """Only what differs from the defaults is written (``policy_subset``): the function's own parse of it gives the
    very sections the synth had, for the shipped policy and for one that sets every section's options."""
    import json

    from governor.registry import REGISTRY
    from infra.constructs.function import policy_subset
    from tests.infra.test_nist import EVERYTHING_ON

    shipped = parse_policy({})
    for policy in (shipped, parse_policy(EVERYTHING_ON)):
        for capability in REGISTRY.values():
            sections = capability.environment_sections
            carried = parse_policy(json.loads(policy_subset(policy, sections)))
            for name in ("fleet", "ledger", *sections):
                assert getattr(carried, name) == getattr(policy, name), (capability.name, name)
    assert len(policy_subset(shipped, REGISTRY["idle"].environment_sections)) < 100  # the defaults take no room


def test_the_demo_gives_each_function_the_policy_the_stack_gives_it() -> None:
    """The demo and the reliability deployment write ``GOVERNOR_POLICY`` as the synth does, so a section a function
    reads but its registry entry does not list fails in the demo too (it once hid idle's missing price table)."""
    from governor.registry import REGISTRY
    from governor_cli.demo.bootstrap import LocalStack
    from infra.constructs.function import policy_subset
    from tests.infra.test_nist import EVERYTHING_ON

    stack = LocalStack(dlq_urls={name: f"https://sqs/{name}" for name in REGISTRY})
    for policy in (parse_policy({}), parse_policy(EVERYTHING_ON)):
        for capability in REGISTRY.values():
            written = stack.environment(capability.name, policy)["GOVERNOR_POLICY"]
            assert written == policy_subset(policy, capability.environment_sections, capability.name)
