"""The policy model: the shipped file is valid and report-only; each kind of bad file names its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from governor.policy import PolicyError, load_policy, parse_policy, parse_policy_text
from tests.conftest import ROOT


def test_shipped_policy_is_valid_and_report_only() -> None:
    """Every section that changes resources is report-only; findings and reports are delivered (issue 32: a fresh
    deploy speaks on day one; tests/unit/test_shipped_defaults.py)."""
    policy = load_policy(ROOT / "governor.yaml")
    for section in ("idle", "spot", "network", "keys", "lifecycle", "audit"):
        assert getattr(policy, section).enforce is False, section
    assert policy.notifications.enforce is True and policy.reports.enforce is True
    assert policy.keys.kms_max_rotation_days == 90
    assert [(r.from_port, r.to_port) for r in policy.network.training_ports] == [(2222, 2223)]


def test_shipped_file_equals_the_model_defaults() -> None:
    """governor.yaml documents the defaults; it must not drift from the model."""
    assert load_policy(ROOT / "governor.yaml") == parse_policy({})


@pytest.mark.parametrize(
    ("text", "path", "reason"),
    [
        ("idle:\n  windw_minutes: 60\n", "idle.windw_minutes", "unknown field"),
        ("keys:\n  kms_max_rotation_days: 30\n", "keys.kms_max_rotation_days", "greater than or equal to 90"),
        ("keys:\n  kms_max_rotation_days: 3000\n", "keys.kms_max_rotation_days", "less than or equal to 2560"),
        ("network:\n  enforce: maybe\n", "network.enforce", "boolean"),
        ("spot:\n  replacement: always\n", "spot.replacement", "'none', 'spot' or 'on-demand'"),
        ("network:\n  training_ports: ['2223-2222']\n", "network.training_ports.0", "after its end"),
        ("network:\n  trusted_cidrs: ['10.0.0.0/0']\n", "network.trusted_cidrs", "whole world"),
        ("network:\n  trusted_cidrs: ['not-a-cidr']\n", "network.trusted_cidrs", "does not appear to be"),
        ("keys:\n  access_key_warn_days: 100\n", "keys", "must not exceed"),
        ("bogus: {}\n", "bogus", "unknown field"),
    ],
)
def test_bad_policy_names_field_and_reason(text: str, path: str, reason: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(text, "my.yaml")
    message = str(caught.value)
    assert message.startswith("my.yaml: ")
    assert path in message
    assert reason in message


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("idle:\n  enforce: [true\n")
    with pytest.raises(PolicyError, match=r"p\.yaml: .*line"):
        load_policy(bad)


def test_top_level_must_be_mapping() -> None:
    with pytest.raises(PolicyError, match="top level must be a mapping"):
        parse_policy_text("- a\n- b\n")


def test_missing_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "absent.yaml")


def test_keys_per_kind_enforcement_overrides_section() -> None:
    policy = parse_policy({"keys": {"enforce": True, "enforce_secrets": False}})
    assert policy.keys.enforces("kms") and policy.keys.enforces("access_keys")
    assert not policy.keys.enforces("secrets")


def test_gpu_family_matching() -> None:
    fleet = parse_policy({}).fleet
    assert fleet.is_gpu_type("g5.xlarge") and fleet.is_gpu_type("p4d.24xlarge") and fleet.is_gpu_type("trn1.2xlarge")
    assert fleet.is_gpu_type("inf2.xlarge") and fleet.is_gpu_type("dl1.24xlarge")
    assert not fleet.is_gpu_type("m5.large")
    assert not fleet.is_gpu_type("gr6.4xlarge")
    assert not fleet.is_gpu_type("c7g.large")


def test_the_ledger_keeps_an_exemptions_setting_as_long_as_the_exemption_may_last() -> None:
    """Issue 33: the end of ``exempt=true`` counts from its recorded setting, which the ledger must still hold."""
    with pytest.raises(PolicyError, match=r"ledger\.retention_days"):
        parse_policy({"ledger": {"retention_days": 30}, "fleet": {"max_exemption_days": 90}})
    assert parse_policy({"ledger": {"retention_days": 30}, "fleet": {"max_exemption_days": 30}})
