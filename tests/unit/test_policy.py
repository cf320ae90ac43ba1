"""The policy model: the shipped file is valid and report-only; each kind of bad file names its field."""

from __future__ import annotations

from pathlib import Path

import pytest

from governor.policy import (
    Policy,
    PolicyError,
    PolicyWarning,
    load_policy,
    moved_keys,
    parse_policy,
    parse_policy_text,
    policy_warnings,
)
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


#: The price book's keys where they were until they became the core ``pricing`` section (issue 34).
OLD_PRICE_KEYS = """\
lifecycle:
  enforce: true
  use_price_list_api: true
  effective_rates: cost_explorer
  prices_as_of: 2026-10-01
  prices:
    g5.xlarge: {on_demand: 2.0, spot: 0.5, gpus: 1}
"""
NEW_PRICE_KEYS = """\
lifecycle:
  enforce: true
pricing:
  use_price_list_api: true
  effective_rates: cost_explorer
  prices_as_of: 2026-10-01
  prices:
    g5.xlarge: {on_demand: 2.0, spot: 0.5, gpus: 1}
"""


def test_a_price_key_at_its_old_place_is_read_at_its_new_one_with_one_warning_each() -> None:
    with pytest.warns(PolicyWarning) as caught:
        old = parse_policy_text(OLD_PRICE_KEYS, "old.yaml")
    assert old == parse_policy_text(NEW_PRICE_KEYS, "new.yaml")
    assert old.lifecycle.enforce is True and old.pricing.prices["g5.xlarge"].on_demand == 2.0
    assert sorted(str(w.message) for w in caught) == [
        f"lifecycle.{key} is deprecated: move it to pricing.{key}"
        for key in sorted(("effective_rates", "prices", "prices_as_of", "use_price_list_api"))
    ]


def test_the_current_shape_warns_nothing() -> None:
    with policy_warnings() as warned:
        parse_policy_text(NEW_PRICE_KEYS)
        load_policy(ROOT / "governor.yaml")
    assert warned == []


def test_a_key_at_both_places_is_an_error_naming_the_old_path() -> None:
    both = NEW_PRICE_KEYS.replace("  enforce: true\n", "  enforce: true\n  prices_as_of: 2026-09-01\n", 1)
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(both, "my.yaml")
    assert (
        str(caught.value)
        == "my.yaml: lifecycle.prices_as_of: moved to pricing.prices_as_of, which is set too: delete this one"
    )


def test_an_old_key_s_bad_value_is_refused_at_its_new_place() -> None:
    with (
        pytest.warns(PolicyWarning),
        pytest.raises(PolicyError, match=r"pricing\.effective_rate_days: Input should be"),
    ):
        parse_policy({"lifecycle": {"effective_rate_days": 0}})


def test_every_moved_key_is_a_field_of_its_new_section_only() -> None:
    assert {(old, key) for old, key in moved_keys()} >= {("lifecycle", "prices"), ("lifecycle", "cur")}
    for (old, key), new in moved_keys().items():
        assert key in Policy.model_fields[new].annotation.model_fields, (old, key)  # type: ignore[union-attr]
        assert key not in Policy.model_fields[old].annotation.model_fields, (old, key)  # type: ignore[union-attr]


def test_validate_prints_each_warning_on_one_line_and_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from governor_cli.main import main

    old = tmp_path / "old.yaml"
    old.write_text(OLD_PRICE_KEYS)
    assert main(["validate", str(old)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{old}: valid (enforcing: lifecycle; delivering: notifications, reports)\n"
    assert f"{old}: warning: lifecycle.prices is deprecated: move it to pricing.prices\n" in err
    assert len(err.splitlines()) == 4 and "Traceback" not in err
    old.write_text(NEW_PRICE_KEYS.replace("lifecycle:\n", "lifecycle:\n  prices: {}\n", 1))
    assert main(["validate", str(old)]) == 2
    assert capsys.readouterr().err == (
        f"governor: {old}: lifecycle.prices: moved to pricing.prices, which is set too: delete this one\n"
    )


def test_other_commands_print_a_policy_warning_as_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import warnings

    from governor_cli.main import _policy_warnings_one_line

    with _policy_warnings_one_line(), warnings.catch_warnings():
        warnings.simplefilter("always", PolicyWarning)
        parse_policy({"lifecycle": {"prices": {}}})
    assert capsys.readouterr().err == "governor: warning: lifecycle.prices is deprecated: move it to pricing.prices\n"
