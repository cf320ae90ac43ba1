"""The capability registry: every handler module is registered, typed actions keep their serialised shape, and the
synth summary and ``validate`` describe each function by its registry entry (notifier and report included)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from governor.capability import BASE_PERMISSIONS, FANOUT
from governor.domain.actions import Action, Checkpoint, Notify
from governor.domain.decision import Decision
from governor.idle.actions import Stop, Terminate
from governor.network.actions import RevokeIngress
from governor.policy import Policy, parse_policy
from governor.registry import REGISTRY
from governor_cli.commands.demo import function_lines
from tests.conftest import ROOT
from tests.imports import modules

PACKAGE = ROOT / "lambdas" / "governor"


def _capability_packages() -> set[str]:
    """Packages under governor/ holding a Lambda entry (``<name>/handler.py``)."""
    return {p.parent.name for p in PACKAGE.glob("*/handler.py")}


def test_every_capability_package_has_a_registry_entry() -> None:
    missing = sorted(_capability_packages() - set(REGISTRY))
    assert not missing, f"capability packages with no registry entry (governor/registry.py): {missing}"
    assert set(REGISTRY) == _capability_packages(), "registry entries without a capability package"


def test_each_capability_package_holds_its_handler_and_domain() -> None:
    for name, capability in REGISTRY.items():
        assert capability.handler == f"governor.{name}.handler.lambda_handler"
        assert (PACKAGE / name / "__init__.py").is_file(), name
        assert (PACKAGE / name / "domain.py").is_file(), name


def test_each_entry_names_a_real_handler_section_and_adapters() -> None:
    policy = Policy()
    for name, capability in REGISTRY.items():
        module = importlib.import_module(capability.module)
        assert callable(module.lambda_handler), name
        for section in capability.environment_sections:
            assert hasattr(policy, section), f"{name}: no policy section {section}"
        for adapter in capability.adapters:
            importlib.import_module(adapter)
        for trigger in capability.triggers:
            assert trigger.line(policy), f"{name}: {trigger.id}"


def _action_classes(base: type[Action] = Action) -> set[type[Action]]:
    """Every concrete typed action class the runtime defines (one with its own ``type``), loaded or not yet."""
    for module in modules():
        if module.startswith("governor.") and module.endswith(".actions"):
            importlib.import_module(module)
    found: set[type[Action]] = set()
    for cls in base.__subclasses__():
        found |= _action_classes(cls)
        if cls.model_fields["type"].default is not None and "type" in cls.__annotations__:
            found.add(cls)
    return found


def test_registered_actions_are_the_typed_action_classes() -> None:
    """Every typed action class is one a capability declares, and no two share a ``type`` (the composed union)."""
    returned = {cls for capability in REGISTRY.values() for cls in capability.actions}
    assert returned == set(REGISTRY.actions().values())
    assert _action_classes() == set(REGISTRY.actions().values()), "an action class no capability returns"


def test_permissions_follow_the_policy_options() -> None:
    shipped = Policy()
    options = parse_policy(
        {
            "spot": {"replacement": "on-demand", "deregister_from_target_groups": False},
            "idle": {"asg_action": "report"},
            "pricing": {"use_price_list_api": True},
            "notifications": {"email_sender": "governor@example.com"},
        },
        source="options",
    )
    assert "ec2:RunInstances" not in REGISTRY["spot"].permissions(shipped)
    assert {"ec2:RunInstances", "iam:PassRole"} <= REGISTRY["spot"].permissions(options)
    assert "elasticloadbalancing:DeregisterTargets" not in REGISTRY["spot"].permissions(options)
    assert "autoscaling:TerminateInstanceInAutoScalingGroup" in REGISTRY["idle"].permissions(shipped)
    assert "autoscaling:TerminateInstanceInAutoScalingGroup" not in REGISTRY["idle"].permissions(options)
    assert "pricing:GetProducts" in REGISTRY["lifecycle"].permissions(options)
    assert "ses:SendEmail" not in REGISTRY["report"].permissions(shipped)
    assert "ses:SendEmail" in REGISTRY["report"].permissions(options)
    # Stop now is delegated to the idle function: the interactions role never stops an instance itself.
    assert "ec2:StopInstances" not in REGISTRY["interactions"].permissions(shipped)
    for capability in REGISTRY.values():
        assert not capability.permissions(shipped) & BASE_PERMISSIONS, f"{capability.name} restates a base grant"


def test_typed_actions_serialise_as_before() -> None:
    """Only the fields the domain set are written, so ledger items, explain output and findings keep their shape."""
    assert Stop(enforced=True).model_dump() == {"type": "stop", "enforced": True}
    assert Notify(enforced=False, owner=None).model_dump() == {"type": "notify", "enforced": False, "owner": None}
    revoke = RevokeIngress(
        enforced=True, group_id="sg-1", rule_ids=["sgr-1"], protocol="tcp", ports="22", source="0.0.0.0/0", reason="x"
    )
    assert revoke.model_dump() == {
        "type": "revoke_ingress",
        "enforced": True,
        "group_id": "sg-1",
        "rule_ids": ["sgr-1"],
        "protocol": "tcp",
        "ports": "22",
        "source": "0.0.0.0/0",
        "reason": "x",
    }
    decision = Decision(policy="network", verdict="act", resource="sg-1", actions=[revoke])
    assert json.loads(decision.model_dump_json())["actions"][0] == revoke.model_dump()
    assert revoke.model_copy(update={"enforced": False}).model_dump()["enforced"] is False


def test_actions_parse_back_to_their_class_and_refuse_unknown_fields() -> None:
    parse = REGISTRY.parse_action
    parsed = parse({"type": "checkpoint", "enforced": True, "command": "kill -USR1 1", "timeout": 60})
    assert isinstance(parsed, Checkpoint) and parsed.command == "kill -USR1 1"
    assert isinstance(parse({"type": "terminate"}), Terminate)
    with pytest.raises(ValidationError):
        Checkpoint.model_validate({"command": "x", "comand": "typo"})
    with pytest.raises(ValidationError):
        parse({"type": "reboot"})


@pytest.mark.parametrize(
    ("enforce", "notifier", "report"),
    [
        (False, "report-only: logs what it would send", "report-only: archives to S3, sends nothing"),
        (True, "DELIVERS to Slack and email", "DELIVERS to Slack and email, archives to S3"),
    ],
)
def test_synth_summary_shows_notifier_and_report_modes_from_their_sections(
    enforce: bool, notifier: str, report: str
) -> None:
    """Their sections are ``notifications`` and ``reports``: the summary used to say report-only whatever they said."""
    policy = parse_policy({"notifications": {"enforce": enforce}, "reports": {"enforce": enforce}}, source="t")
    functions = {
        name: SimpleNamespace(description=REGISTRY[name].description, triggers=REGISTRY[name].trigger_lines(policy))
        for name in REGISTRY
    }
    lines = function_lines(policy, functions)
    assert f"  function notifier [{notifier}]: {REGISTRY['notifier'].description}" in lines
    assert f"  function report [{report}]: {REGISTRY['report'].description}" in lines
    assert f"  function idle [report-only]: {REGISTRY['idle'].description}" in lines


def test_validate_lists_every_enforcing_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from governor_cli.main import main

    policy = tmp_path / "governor.yaml"
    policy.write_text("notifications:\n  enforce: true\nreports:\n  enforce: true\nnetwork:\n  enforce: true\n")
    assert main(["validate", str(policy)]) == 0
    assert "enforcing: network; delivering: notifications, reports" in capsys.readouterr().out


def test_organization_mode_adds_assume_role_only_to_functions_acting_in_member_accounts() -> None:
    policy = Policy()
    acting = {name for name, capability in REGISTRY.items() if capability.member_accounts}
    assert acting == {"idle", "keys", "lifecycle", "network", "spot"}
    for name, capability in REGISTRY.items():
        assert "sts:AssumeRole" not in capability.permissions(policy)
        with_org = capability.permissions(policy, organization=True)
        assert ("sts:AssumeRole" in with_org) == (name in acting)
        fanout = FANOUT if capability.fans_out else frozenset()
        assert with_org - {"sts:AssumeRole"} == capability.permissions(policy) | fanout


def test_only_sweeps_that_run_per_account_and_region_list_and_consume_targets() -> None:
    """Organisation mode: the idle, keys, network and lifecycle sweeps fan out (governor.fanout); their roles may list
    the OUs' accounts and use their own targets queue, no other function may."""
    policy = Policy()
    fanned = {name for name, capability in REGISTRY.items() if capability.fans_out}
    assert fanned == {"idle", "keys", "lifecycle", "network"}
    for capability in REGISTRY.values():
        assert not FANOUT & capability.permissions(policy)
        assert (capability.permissions(policy, organization=True) >= FANOUT) == capability.fans_out
