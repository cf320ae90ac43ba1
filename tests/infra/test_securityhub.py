"""The Security Hub export's infrastructure: built from its registry entry alone, its role holding BatchImportFindings
on this account's default product only (with ``asff``) and PutObject only under the OCSF prefix (with a bucket), every
statement valid per the Service Authorization Reference, and cdk-nag satisfied (``app.synth`` raises otherwise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from governor.policy import parse_policy
from infra.app_builder import build_app
from tests.infra.sar import statements, validate

ACCOUNT = "123456789012"


def _template(tmp_path: Path, **section: Any) -> dict[str, Any]:
    import json

    policy = parse_policy({"securityhub": section})
    app, stack = build_app(policy=policy, outdir=str(tmp_path), context={"account": ACCOUNT})
    app.synth()
    return dict(json.loads((tmp_path / f"{stack.stack_name}.template.json").read_text()))


def _grants(template: dict[str, Any], service: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for where, statement in statements(template):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if any(str(a).startswith(f"{service}:") for a in actions):
            found.append((where, statement))
    return found


@pytest.fixture(scope="module")
def exporting(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _template(tmp_path_factory.mktemp("sh"), enforce=True, asff=True, ocsf_bucket="lake-bucket")


def test_the_function_is_built_from_the_registry_entry_on_the_governor_bus(exporting: dict[str, Any]) -> None:
    functions = [k for k, v in exporting["Resources"].items() if v["Type"] == "AWS::Lambda::Function"]
    assert any(k.startswith("SecurityHubFunction") for k in functions)
    rules = {k: v for k, v in exporting["Resources"].items() if k.startswith("SecurityHubFindings")}
    rule = next(v for v in rules.values() if v["Type"] == "AWS::Events::Rule")
    assert rule["Properties"]["EventPattern"] == {"source": ["gpu-fleet-governor"], "detail-type": ["Governor Finding"]}


def test_batch_import_findings_only_on_the_accounts_default_product(exporting: dict[str, Any]) -> None:
    [(where, statement)] = _grants(exporting, "securityhub")
    assert "SecurityHub" in where and statement["Action"] == "securityhub:BatchImportFindings"
    assert statement["Resource"] == f"arn:aws:securityhub:us-east-1:{ACCOUNT}:product/{ACCOUNT}/default"


def test_put_object_only_under_the_ocsf_prefix(exporting: dict[str, Any]) -> None:
    [(_, statement)] = [g for g in _grants(exporting, "s3") if "SecurityHub" in g[0]]
    assert statement["Action"] == "s3:PutObject"
    assert statement["Resource"] == "arn:aws:s3:::lake-bucket/ocsf/*"


def test_every_securityhub_statement_is_valid_per_the_sar(exporting: dict[str, Any]) -> None:
    assert [str(p) for p in validate(exporting) if "SecurityHub" in str(p)] == []


def test_report_only_without_asff_or_bucket_grants_neither(tmp_path: Path) -> None:
    template = _template(tmp_path)
    assert _grants(template, "securityhub") == []
    assert [g for g in _grants(template, "s3") if "SecurityHub" in g[0]] == []
