"""Organisation mode (issue 23): off by default, the spoke template the StackSet deploys, and the hub's side of it.

moto does not evaluate IAM, so the spoke role's trust policy is evaluated with the repository's own evaluator
(tests/infra/policy_eval.py) and every statement of both templates is checked against the Service Authorization
Reference (tests/infra/sar.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.app_builder import build_app
from infra.settings import OrganizationSettings, Settings, SettingsError
from tests.infra.conftest import Synth
from tests.infra.policy_eval import Request, resolve, statement_matches
from tests.infra.sar import statements, validate
from tests.infra.test_sar import _known

ORG = {"id": "o-abcdefghij", "ou_ids": ["ou-ab12-abcdefgh"], "regions": ["us-east-1", "eu-west-1"]}
HUB = "111111111111"
ORG_ONLY_TYPES = {"AWS::CloudFormation::StackSet"}


class OrgSynth:
    def __init__(self) -> None:
        app, stack = build_app(context={"organization": ORG})
        self.stack = stack
        self.json: dict[str, Any] = app.synth().get_stack_by_name(stack.stack_name).template
        (self.stack_set,) = [r for r in self.json["Resources"].values() if r["Type"] == "AWS::CloudFormation::StackSet"]
        self.spoke: dict[str, Any] = json.loads(self.stack_set["Properties"]["TemplateBody"])

    def of_type(self, template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


@pytest.fixture(scope="module")
def org() -> OrgSynth:
    return OrgSynth()


# --- 1. opt-in, validated, off by default ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({**ORG, "id": "org-1"}, "organization.id"),
        ({**ORG, "ou_ids": ["ou-ab12-abcdefgh", "sales"]}, "organization.ou_ids: [1] 'sales'"),
        ({**ORG, "ou_ids": []}, "organization.ou_ids"),
        ({**ORG, "regions": ["us-east-1", "Mars-1"]}, "organization.regions: [1] 'Mars-1'"),
        ({**ORG, "spoke_role_name": "x" * 60}, "organization.spoke_role_name"),
        ({**ORG, "max_concurrent_percentage": 0}, "organization.max_concurrent_percentage"),
        ({**ORG, "colour": "blue"}, "organization.colour"),
        ("{not json", "organization: not a JSON object"),
    ],
)
def test_a_bad_organization_stops_the_synth_with_the_field_path(value: object, path: str) -> None:
    with pytest.raises(SettingsError, match=path.replace("[", r"\[").replace("]", r"\]")):
        Settings.from_context({"organization": value}.get)


def test_the_organization_comes_from_cdk_json_or_a_c_json_string() -> None:
    assert Settings.from_context({}.get).organization is None
    from_cli = Settings.from_context({"organization": json.dumps(ORG)}.get).organization
    assert from_cli == OrganizationSettings.model_validate(ORG)
    assert from_cli is not None and from_cli.spoke_role("eu-west-1", "idle") == "GovernorSpoke-idle-eu-west-1"


def test_without_the_organization_the_hub_has_nothing_of_it(synth: Synth) -> None:
    """The default synth (the session fixture every other infra test checks) carries no organisation resource."""
    assert not ORG_ONLY_TYPES & {r["Type"] for r in synth.json["Resources"].values()}
    assert not [k for k in synth.json["Resources"] if k.startswith("Organization")]
    assert "GOVERNOR_SPOKE_ROLE" not in json.dumps(synth.json)
    assert synth.stack.organization is None
    for off in ("", None, False):
        assert Settings.from_context({"organization": off}.get).organization is None


def test_organization_mode_only_adds_to_the_hub(synth: Synth, org: OrgSynth) -> None:
    before = {k: v["Type"] for k, v in synth.json["Resources"].items()}
    after = {k: v["Type"] for k, v in org.json["Resources"].items()}
    assert {k: after.get(k) for k in before} == before
    added = {after[k] for k in set(after) - set(before)}
    assert ORG_ONLY_TYPES | {"AWS::Events::EventBus", "AWS::Events::Rule"} <= added
    assert all(k.startswith("Organization") for k in set(after) - set(before))


# --- 2. the spoke ---------------------------------------------------------------------------------------------


def _patterns(template: dict[str, Any], bus: str | None) -> list[str]:
    found = []
    for rule in template["Resources"].values():
        props = rule["Properties"]
        if rule["Type"] != "AWS::Events::Rule" or "EventPattern" not in props:
            continue
        if (bus is None and props.get("EventBusName") is None) or (
            bus and bus in json.dumps(props.get("EventBusName"))
        ):
            found.append(json.dumps(props["EventPattern"], sort_keys=True))
    return sorted(found)


def test_the_spoke_forwards_exactly_what_the_hub_rules_match(org: OrgSynth) -> None:
    hub = _patterns(org.json, None)
    assert len(hub) >= 7
    assert _patterns(org.spoke, None) == hub  # the spoke's default-bus rules
    assert _patterns(org.json, "OrganizationIntake") == hub  # and the hub routes them again from its intake bus
    for rule in org.of_type(org.spoke, "AWS::Events::Rule").values():
        (target,) = rule["Properties"]["Targets"]
        assert target["Arn"] == {"Ref": "HubBusArn"} and "RoleArn" in target


def test_the_spoke_has_no_code_and_no_bootstrap_dependency(org: OrgSynth) -> None:
    kinds = {r["Type"] for r in org.spoke["Resources"].values()}
    assert not {k for k in kinds if k.startswith(("AWS::Lambda::", "Custom::"))}
    assert "BootstrapVersion" not in org.spoke.get("Parameters", {}) and "Rules" not in org.spoke
    assert set(org.spoke["Parameters"]) == {"HubAccountId", "HubBusArn", "HubFunctionRoleArns"}
    assert {"AWS::SSM::Parameter", "AWS::IAM::Role"} <= kinds


ACTING = ["idle", "keys", "lifecycle", "network", "spot"]  # the capabilities that act in member accounts, sorted


def _spoke_roles(org: OrgSynth) -> dict[str, dict[str, Any]]:
    """The spoke's execution roles by capability (from their fixed names)."""
    found = {}
    for role in org.of_type(org.spoke, "AWS::IAM::Role").values():
        name = role["Properties"].get("RoleName")
        if name:
            found[name["Fn::Join"][1][0].removeprefix("GovernorSpoke-")] = role
    return found


def test_each_capability_has_its_own_spoke_role_with_a_fixed_name_per_region(org: OrgSynth) -> None:
    """Issue 33: one spoke role held all five capabilities' grants, so the Spot function gained key and network
    powers in every member account."""
    roles = _spoke_roles(org)
    assert sorted(roles) == ACTING
    for function, role in roles.items():
        assert role["Properties"]["RoleName"] == {
            "Fn::Join": ["-", [f"GovernorSpoke-{function}", {"Ref": "AWS::Region"}]]
        }


def _with_parameters(value: Any, parameters: dict[str, Any]) -> Any:
    """The spoke template as one StackSet instance deploys it: parameter Refs replaced by the hub's values."""
    if isinstance(value, dict):
        if set(value) == {"Ref"} and value["Ref"] in parameters:
            return parameters[value["Ref"]]
        return {k: _with_parameters(v, parameters) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_parameters(v, parameters) for v in value]
    return value


def _parameters(hub_roles: list[str]) -> dict[str, Any]:
    bus = f"arn:aws:events:us-east-1:{HUB}:event-bus/governor-org"
    return {"HubAccountId": HUB, "HubFunctionRoleArns": hub_roles, "HubBusArn": bus}


def _trust(org: OrgSynth, hub_roles: list[str], function: str = "spot") -> list[dict[str, Any]]:
    role = _spoke_roles(org)[function]
    document = _with_parameters(role["Properties"]["AssumeRolePolicyDocument"], _parameters(hub_roles))
    return [resolve(s, org.spoke["Resources"]) for s in document["Statement"]]


def _may_assume(statements: list[dict[str, Any]], principal_arn: str, **context: Any) -> bool:
    account = principal_arn.split(":")[4]
    for statement in statements:
        principals = statement["Principal"]["AWS"]
        principals = principals if isinstance(principals, list) else [principals]
        in_principal = any(p in (f"arn:aws:iam::{account}:root", account) for p in principals)
        request = Request("sts:AssumeRole", "*", {"aws:PrincipalArn": principal_arn, **context})
        if statement["Effect"] == "Allow" and in_principal and statement_matches(statement, request):
            return True
    return False


HUB_ROLES = [f"arn:aws:iam::{HUB}:role/GpuFleetGovernor-{f.capitalize()}FunctionRole-ABC" for f in ACTING]


def test_each_spoke_role_admits_only_its_own_hub_function_role_inside_the_organization(org: OrgSynth) -> None:
    org_id = {"aws:PrincipalOrgID": ORG["id"]}
    for index, function in enumerate(ACTING):
        trust = _trust(org, HUB_ROLES, function)
        own = HUB_ROLES[index]
        assert _may_assume(trust, own, **org_id), function
        assert not _may_assume(trust, own, **{"aws:PrincipalOrgID": "o-otherorg00"})  # same ARN, another org
        assert not any(_may_assume(trust, other, **org_id) for other in HUB_ROLES if other != own), function
        assert not _may_assume(trust, f"arn:aws:iam::{HUB}:role/Admin", **org_id)
        assert not _may_assume(trust, own.replace(HUB, "999999999999"))
    parameters = org.stack_set["Properties"]["Parameters"]
    (listed,) = [p["ParameterValue"] for p in parameters if p["ParameterKey"] == "HubFunctionRoleArns"]
    order = [ref["Fn::GetAtt"][0] for ref in listed["Fn::Join"][1]]  # the hub passes its roles in the same order
    assert all(o.startswith(f.capitalize()) for f, o in zip(ACTING, order, strict=True)), order


def _spoke_policy(org: OrgSynth, function: str) -> dict[str, Any]:
    (policy,) = [
        p
        for k, p in org.of_type(org.spoke, "AWS::IAM::Policy").items()
        if k == f"{function.capitalize()}ExecutionPolicy"
    ]
    return policy


def test_each_spoke_role_holds_its_own_capabilitys_hub_grants_and_nothing_of_the_hub(org: OrgSynth) -> None:
    idle = json.dumps(_spoke_policy(org, "idle"))
    for action in ("ec2:StopInstances", "ec2:TerminateInstances", "ssm:SendCommand", "ec2:DescribeInstances"):
        assert action in idle
    for function in ACTING:
        text = json.dumps(_spoke_policy(org, function))
        for hub_only in ("dynamodb:", "sqs:", "logs:", "xray:", "events:PutEvents", "sts:", "organizations:"):
            assert hub_only not in text, (function, hub_only)
    stops = [
        s
        for s in _spoke_policy(org, "idle")["Properties"]["PolicyDocument"]["Statement"]
        if "ec2:StopInstances" in s["Action"]
    ]
    assert stops and all("ec2:InstanceType" in json.dumps(s["Condition"]) for s in stops)
    spot = json.dumps(_spoke_policy(org, "spot"))
    for other in ("kms:", "iam:UpdateAccessKey", "secretsmanager:", "ec2:RevokeSecurityGroupIngress", "ec2:Stop"):
        assert other not in spot, other  # the Spot function gains no key, network or idle power in members


def test_both_templates_are_valid_per_the_sar(org: OrgSynth) -> None:
    spoke = _with_parameters(org.spoke, _parameters(HUB_ROLES))
    assert sum(1 for _ in statements(spoke)) > 20
    assert not validate(spoke)
    assert not [str(p) for p in validate(org.json) if not _known(p)]  # the hub: only test_sar's known finding


# --- 3. the hub side ------------------------------------------------------------------------------------------


def test_the_stack_set_is_service_managed_with_auto_deployment(org: OrgSynth) -> None:
    props = org.stack_set["Properties"]
    assert props["PermissionModel"] == "SERVICE_MANAGED" and props["CallAs"] == "DELEGATED_ADMIN"
    assert props["AutoDeployment"] == {"Enabled": True, "RetainStacksOnAccountRemoval": False}
    assert props["Capabilities"] == ["CAPABILITY_NAMED_IAM"]
    assert props["OperationPreferences"] == {
        "FailureTolerancePercentage": 10,
        "MaxConcurrentPercentage": 25,
        "RegionConcurrencyType": "PARALLEL",
    }
    group, hub_regions = props["StackInstancesGroup"]  # the second: the hub's other regions (test_deploy_environments)
    assert hub_regions["DeploymentTargets"]["AccountFilterType"] == "INTERSECTION"
    assert group["Regions"] == ORG["regions"]
    assert group["DeploymentTargets"]["OrganizationalUnitIds"] == ORG["ou_ids"]
    assert group["DeploymentTargets"]["AccountFilterType"] == "DIFFERENCE"  # not the hub's own account
    assert len(props["TemplateBody"].encode()) < 51_200


def test_the_intake_bus_accepts_only_the_organization(org: OrgSynth) -> None:
    (policy,) = [p for k, p in org.of_type(org.json, "AWS::Events::EventBusPolicy").items() if "Intake" in k]
    statement = policy["Properties"]["Statement"]
    assert statement["Action"] == "events:PutEvents" and statement["Principal"] == {"AWS": "*"}
    assert statement["Condition"] == {"StringEquals": {"aws:PrincipalOrgID": ORG["id"]}}


def test_hub_functions_assume_only_the_spoke_role_inside_the_organization(org: OrgSynth) -> None:
    grants = [
        s
        for p in org.of_type(org.json, "AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "sts:AssumeRole" in json.dumps(s["Action"])
    ]
    assert grants
    for statement in grants:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        assert sorted(json.dumps(r) for r in resources) == sorted(
            json.dumps({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":iam::*:role/GovernorSpoke-{r}"]]})
            for r in ORG["regions"]
        ) or all("GovernorSpoke-" in json.dumps(r) for r in resources)
        assert statement["Condition"] == {"StringEquals": {"aws:ResourceOrgID": ORG["id"]}}
    roles = json.dumps(org.stack_set["Properties"]["Parameters"])
    assert "SpotFunctionRole" in roles and "NotifierFunctionRole" not in roles


# --- 4. the sweep fan-out and the spoke's dead letters ------------------------------------------------------------


def _function_of(org: OrgSynth, mapping: dict[str, Any]) -> str:
    return str(mapping["Properties"]["FunctionName"]["Ref"])


def test_sweeps_fan_out_one_target_per_message_with_bounded_concurrency(org: OrgSynth) -> None:
    mappings = org.of_type(org.json, "AWS::Lambda::EventSourceMapping")
    fanned = sorted(_function_of(org, m) for m in mappings.values())
    assert len(fanned) == 4 and all(any(n in f for f in fanned) for n in ("Idle", "Network", "Keys", "Lifecycle"))
    queues = org.of_type(org.json, "AWS::SQS::Queue")
    for mapping in mappings.values():
        props = mapping["Properties"]
        assert props["BatchSize"] == 1 and props["ScalingConfig"] == {"MaximumConcurrency": 10}
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        queue = queues[props["EventSourceArn"]["Fn::GetAtt"][0]]["Properties"]
        assert queue["RedrivePolicy"]["maxReceiveCount"] == 3  # the handler reports the third failure as a finding
        assert "KmsMasterKeyId" in queue
        function = org.json["Resources"][_function_of(org, mapping)]["Properties"]
        settings = json.dumps(function["Environment"]["Variables"]["GOVERNOR_FANOUT"])
        assert '\\"attempts\\":3' in settings and "eu-west-1" in settings
        assert queue["VisibilityTimeout"] > function["Timeout"]  # a running target is never delivered twice


def test_the_planner_lists_only_the_organizations_ous(org: OrgSynth) -> None:
    grants = [
        s
        for p in org.of_type(org.json, "AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "organizations:" in json.dumps(s["Action"])
    ]
    assert len(grants) == 4  # idle, keys, network and lifecycle
    for statement in grants:
        assert sorted(statement["Action"]) == [
            "organizations:ListAccountsForParent",
            "organizations:ListOrganizationalUnitsForParent",
        ]
        assert f"ou/{ORG['id']}/ou-*" in json.dumps(statement["Resource"])


def test_a_listed_account_set_needs_no_organizations_grant() -> None:
    settings = OrganizationSettings.model_validate({**ORG, "sweep_accounts": ["222222222222"]})
    assert settings.sweep_accounts == ("222222222222",)
    with pytest.raises(ValueError, match="12-digit"):
        OrganizationSettings.model_validate({**ORG, "sweep_accounts": ["22"]})
    with pytest.raises(ValueError, match="sweep_concurrency"):
        OrganizationSettings.model_validate({**ORG, "sweep_concurrency": 1})  # Lambda's minimum is 2


def test_the_spoke_forwarding_rules_park_undelivered_events(org: OrgSynth) -> None:
    rules = org.of_type(org.spoke, "AWS::Events::Rule")
    (queue_id,) = org.of_type(org.spoke, "AWS::SQS::Queue")
    assert rules
    for rule in rules.values():
        (target,) = rule["Properties"]["Targets"]
        assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [queue_id, "Arn"]}}
    (policy,) = org.of_type(org.spoke, "AWS::SQS::QueuePolicy").values()
    text = json.dumps(policy)
    assert "events.amazonaws.com" in text and "aws:SourceArn" in text


def test_an_account_list_too_long_for_lambdas_environment_stops_the_synth() -> None:
    """The account list travels in GOVERNOR_FANOUT, counted with the rest of the environment as Lambda counts it."""
    from infra.environment import ENVIRONMENT_LIMIT, environment_sizes

    _, stack = build_app(context={"organization": {**ORG, "sweep_accounts": [f"{n:012d}" for n in range(1, 41)]}})
    assert environment_sizes(stack.functions["idle"].function)[0] < ENVIRONMENT_LIMIT
    many = {**ORG, "sweep_accounts": [f"{n:012d}" for n in range(1, 301)]}
    with pytest.raises(SettingsError, match=r"^context organization\.sweep_accounts: the \w+ function's environment"):
        build_app(context={"organization": many})
