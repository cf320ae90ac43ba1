"""The audit lake as deployed: trail, buckets, Glue table with projection, workgroup and one named query per file."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Match

from governor.audit.engine import LocalLake, table_columns
from governor.audit.queries import console_form, list_queries
from governor.policy import Policy
from tests.infra.conftest import Synth


def _one(synth: Synth, kind: str, contains: str = "Audit") -> dict[str, Any]:
    found = [v for k, v in synth.resources(kind).items() if contains in k]
    assert len(found) == 1, f"{kind}: {len(found)} found"
    return found[0]["Properties"]


def test_trail_is_multi_region_validated_and_encrypted_with_the_project_key(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::CloudTrail::Trail",
        {
            "IsMultiRegionTrail": True,
            "EnableLogFileValidation": True,
            "IncludeGlobalServiceEvents": True,
            "EventSelectors": [{"IncludeManagementEvents": True, "ReadWriteType": "All"}],
            "KMSKeyId": {"Fn::GetAtt": [Match.string_like_regexp("^SharedKey"), "Arn"]},
        },
    )


def test_key_policy_lets_cloudtrail_encrypt_only_this_accounts_trails(synth: Synth) -> None:
    key = next(iter(synth.resources("AWS::KMS::Key").values()))
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    trail = [s for s in statements if s.get("Principal", {}).get("Service") == "cloudtrail.amazonaws.com"]
    encrypt = next(s for s in trail if s["Action"] == "kms:GenerateDataKey*")
    assert "kms:EncryptionContext:aws:cloudtrail:arn" in encrypt["Condition"]["StringLike"]


def test_trail_bucket_is_private_tls_only_logged_and_ages_to_infrequent_access(synth: Synth) -> None:
    props = _one(synth, "AWS::S3::Bucket", "AuditTrailBucket")
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["LoggingConfiguration"]["DestinationBucketName"]["Ref"].startswith("AuditAccessLogs")
    rule = props["LifecycleConfiguration"]["Rules"][0]
    assert rule["Transitions"] == [
        {"StorageClass": "STANDARD_IA", "TransitionInDays": Policy().audit.transition_to_infrequent_access_days}
    ]
    assert "ExpirationInDays" not in rule  # kept by default (expire_after_days: null)
    assert (
        props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"][
            "SSEAlgorithm"
        ]
        == "aws:kms"
    )
    for name, policy in synth.resources("AWS::S3::BucketPolicy").items():
        if name.startswith("Audit"):
            denies = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
            assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies), name


def test_glue_table_projects_account_region_and_day_over_the_trail_layout(synth: Synth) -> None:
    table = _one(synth, "AWS::Glue::Table")["TableInput"]
    params = table["Parameters"]
    assert [k["Name"] for k in table["PartitionKeys"]] == ["account", "region", "day"]
    assert params["projection.enabled"] == "true"
    assert params["projection.day.type"] == "date" and params["projection.day.format"] == "yyyy/MM/dd"
    assert params["projection.day.range"] == "2024/01/01,NOW"
    assert params["projection.region.type"] == "enum" and "us-east-1" in params["projection.region.values"]
    template = params["storage.location.template"]["Fn::Join"][1][-1]
    assert template == "/AWSLogs/${account}/CloudTrail/${region}/${day}"


def _hive(text: str) -> Any:
    """Parse a Hive type into a comparable tree: "string", ("struct", ((name, tree), ...)) or ("array", tree)."""
    tree, rest = _hive_at(text.replace(" ", "").lower())
    assert rest == "", rest
    return tree


def _hive_at(text: str) -> tuple[Any, str]:
    if text.startswith("array<"):
        inner, rest = _hive_at(text[len("array<") :])
        return ("array", inner), rest[1:]
    if text.startswith("struct<"):
        rest, fields = text[len("struct<") :], []
        while not rest.startswith(">"):
            name, rest = rest.split(":", 1)
            kind, rest = _hive_at(rest)
            fields.append((name, kind))
            rest = rest[1:] if rest.startswith(",") else rest
        return ("struct", tuple(fields)), rest[1:]
    match = re.match(r"[a-z]+", text)
    assert match
    return match.group(0), text[match.end() :]


def _duck(text: str) -> Any:
    """Parse a DuckDB DESCRIBE type into the same tree (VARCHAR is Hive's string)."""
    tree, rest = _duck_at(text.replace('"', "").lower().strip())
    assert rest.strip() == "", rest
    return tree


def _duck_at(text: str) -> tuple[Any, str]:
    text = text.lstrip()
    if text.startswith("struct("):
        rest, fields = text[len("struct(") :], []
        while not rest.lstrip().startswith(")"):
            name, rest = rest.lstrip().split(" ", 1)
            kind, rest = _duck_at(rest)
            fields.append((name, kind))
            rest = rest.lstrip()
            rest = rest[1:] if rest.startswith(",") else rest
        tree: Any = ("struct", tuple(fields))
        rest = rest.lstrip()[1:]
    else:
        match = re.match(r"[a-z]+", text)
        assert match
        tree, rest = {"varchar": "string"}.get(match.group(0), match.group(0)), text[match.end() :]
    while rest.startswith("[]"):
        tree, rest = ("array", tree), rest[2:]
    return tree, rest


def test_glue_columns_match_the_local_duckdb_view(synth: Synth) -> None:
    table = _one(synth, "AWS::Glue::Table")["TableInput"]
    glue = [(c["Name"], _hive(c["Type"])) for c in table["StorageDescriptor"]["Columns"] + table["PartitionKeys"]]
    lake = LocalLake()
    try:
        local = [(name, _duck(kind)) for name, kind in table_columns(lake)]
    finally:
        lake.close()
    assert [name for name, _ in glue] == [name for name, _ in local]
    assert glue == local


def test_workgroup_enforces_encrypted_results_and_a_bytes_scanned_limit(synth: Synth) -> None:
    config = _one(synth, "AWS::Athena::WorkGroup")["WorkGroupConfiguration"]
    assert config["EnforceWorkGroupConfiguration"] is True
    assert config["BytesScannedCutoffPerQuery"] == Policy().audit.bytes_scanned_cutoff_per_query
    assert config["ResultConfiguration"]["EncryptionConfiguration"]["EncryptionOption"] == "SSE_KMS"
    results = _one(synth, "AWS::S3::Bucket", "AuditResults")
    assert config["ResultConfiguration"]["OutputLocation"]["Fn::Join"][1][1]["Ref"].startswith("AuditResults")
    assert results["LoggingConfiguration"]["DestinationBucketName"]["Ref"].startswith("AuditAccessLogs")


def test_every_query_file_is_a_named_query_with_its_sql(synth: Synth) -> None:
    named = {v["Properties"]["Name"]: v["Properties"] for v in synth.resources("AWS::Athena::NamedQuery").values()}
    specs = list_queries()
    assert set(named) == {spec.name for spec in specs}
    for spec in specs:
        assert named[spec.name]["QueryString"] == console_form(spec.sql)  # ? parameters: runnable in the console
        assert named[spec.name]["Database"] == "gpufleetgovernor_audit"


def test_the_report_function_reads_no_named_query_its_sql_ships_with_its_code(synth: Synth) -> None:
    """The report runs the query library in its code asset, never SQL read back from the workgroup: anyone with
    athena:CreateNamedQuery could add a query there, or with athena:UpdateNamedQuery change a deployed one in place
    (issue 45.6). So its role may not read named queries, and nothing in the template refers to one: no Ref, no
    Fn::GetAtt, no DependsOn (moto's CloudFormation cannot create a NamedQuery, so the report's ``ATHENA_QUERIES``,
    built from their ids, stopped the deploy on the emulator: "Fn::GetAtt references undefined resource")."""
    (report,) = [
        v["Properties"]
        for v in synth.resources("AWS::Lambda::Function").values()
        if "ATHENA_WORKGROUP" in v["Properties"]["Environment"]["Variables"]
    ]
    assert "ATHENA_QUERIES" not in report["Environment"]["Variables"]
    named = set(synth.resources("AWS::Athena::NamedQuery"))
    assert len(named) == len(list_queries())  # still deployed, for operators' console ("Saved queries")
    rest = {
        "Resources": {k: v for k, v in synth.json["Resources"].items() if k not in named},
        "Outputs": synth.json.get("Outputs", {}),
    }
    text = json.dumps(rest)
    assert sorted(logical for logical in named if f'"{logical}"' in text) == []
    granted = {
        action
        for policy in synth.resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        for action in (statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]])
        if policy["Properties"]["Roles"][0]["Ref"] == report["Role"]["Fn::GetAtt"][0]
    }
    assert "athena:StartQueryExecution" in granted
    assert {a for a in granted if a.startswith("athena:") and "NamedQuer" in a} == set()


@pytest.mark.parametrize("name", ["AWS::Glue::Database", "AWS::Athena::WorkGroup", "AWS::CloudTrail::Trail"])
def test_one_of_each(synth: Synth, name: str) -> None:
    assert len(synth.resources(name)) == 1


def test_existing_organisation_trail_is_used_instead_of_creating_one() -> None:
    """A small stack of its own (not the app): the policy points at an organisation trail's existing bucket."""
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template

    from governor.policy import parse_policy
    from infra.constructs.audit import AuditLake
    from infra.constructs.shared import SharedResources
    from infra.settings import Settings

    policy = parse_policy(
        {
            "audit": {
                "create_trail": False,
                "existing_bucket_name": "org-trail-logs",
                "existing_trail_arn": "arn:aws:cloudtrail:us-east-1:999988887777:trail/org",
                "organization_trail": True,
                "organization_id": "o-abcdefghij",
                "accounts": ["111122223333", "444455556666"],
            }
        }
    )
    stack = Stack(App(), "AuditOnly")
    shared = SharedResources(stack, "Shared", policy=policy, bus_name="governor")
    lake = AuditLake(stack, "Audit", policy=policy, settings=Settings(), shared=shared)
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::CloudTrail::Trail", 0)
    params = next(iter(template.find_resources("AWS::Glue::Table").values()))["Properties"]["TableInput"]["Parameters"]
    assert params["projection.account.values"] == "111122223333,444455556666"
    assert params["storage.location.template"] == (
        "s3://org-trail-logs/AWSLogs/o-abcdefghij/${account}/CloudTrail/${region}/${day}"
    )
    assert lake.trail_arn.endswith(":trail/org")
