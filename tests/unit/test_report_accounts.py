"""Organisation rollups (issue 23): the report's per-account table, budgets per account, and the account and region
filters of ``governor ledger export`` and ``governor report``.

Usage sessions carry no account of their own (they are keyed by instance id); they are placed by their instance's
decisions, which the runner stamps with the event's account and region.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest

from governor.policy import PolicyError, parse_policy
from governor.report.render.csv_files import csv_files
from governor.report.render.html_page import render_html
from governor.report.render.slack import render_text, slack_messages
from governor.report.sections.accounts import origin_of, origins
from governor_cli.commands.ledger import filter_origins, parse_origins
from governor_cli.main import UsageError, main
from tests.unit.test_report import _idle, _session, at, sample_ledger
from tests.unit.test_report_views import report_over

A, B = "111111111111", "222222222222"


def _placed(account: str, region: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items as the runner writes them in one account and region: decisions stamped, sessions not."""
    return [{**i, "account": account, "region": region} if i.get("kind") == "decision" else i for i in items]


def org_ledger() -> list[dict[str, Any]]:
    """The sample day, split: the idle g5.12xlarge and its decisions in account A, the Spot box in B (us-west-2)."""
    items = sample_ledger()
    in_a = [i for i in items if i.get("resource", i.get("instance_id")) in ("i-0a11", "i-0c33")]
    in_b = [i for i in items if i.get("resource", i.get("instance_id")) == "i-0b22"]
    rest = [i for i in items if not any(i is x for x in in_a + in_b)]
    in_a.append(_idle("i-0c33", at(1), "busy", 40.0))  # the short session's instance is known in A
    return _placed(A, "us-east-1", in_a) + _placed(B, "us-west-2", in_b) + rest


def test_sessions_are_placed_by_their_instances_decisions() -> None:
    items = org_ledger()
    known = origins(items)
    assert known["i-0a11"] == (A, "us-east-1") and known["i-0b22"] == (B, "us-west-2")
    session = next(i for i in items if i.get("kind") == "session" and i["instance_id"] == "i-0b22")
    assert origin_of(session, known) == (B, "us-west-2")
    assert origin_of({"kind": "interruption", "instance_id": "i-0d44"}, known) == ("unknown", "unknown")


def test_the_account_table_adds_up_to_the_totals() -> None:
    report = report_over(org_ledger())
    cost = report.cost
    assert cost.by_account is not None
    rows = {(r["account"], r["region"]): r for r in cost.by_account.rows}
    assert set(rows) >= {(A, "us-east-1"), (B, "us-west-2")}
    assert rows[(B, "us-west-2")]["gpu_hours"] == pytest.approx(18 * 8)
    assert rows[(A, "us-east-1")]["reclaimed_gpu_hours"] == pytest.approx(cost.idle_gpu_hours_reclaimed)
    for column, total in (
        ("gpu_hours", cost.gpu_hours_total),
        ("cost_usd", cost.cost_total_usd),
        ("idle_gpu_hours", cost.idle_gpu_hours_detected),
        ("idle_usd", cost.idle_cost_usd),
    ):
        assert sum(r[column] for r in cost.by_account.rows) == pytest.approx(total, abs=0.02), column
    assert "Spend by account and region" in render_html(report)
    assert f"account {B} us-west-2" in render_text(report)
    assert f"account {A} us-east-1" in json.dumps(slack_messages(report))
    assert "gpu_hours_by_account.csv" in csv_files(report)


def test_one_account_keeps_the_report_as_it_was() -> None:
    for items in (sample_ledger(), _placed(A, "us-east-1", sample_ledger())):
        report = report_over(items)
        assert report.cost.by_account is None
        assert "account" not in render_text(report).lower()
        assert "gpu_hours_by_account.csv" not in csv_files(report)
        assert "by account" not in render_html(report)


def test_budgets_per_account_beside_budgets_per_team() -> None:
    policy = parse_policy({"budgets": {"teams": {"vision": 100.0}, "accounts": {B: 1000.0, A: 50.0}}})
    report = report_over(org_ledger(), policy)
    rows = {(b.scope, b.team): b for b in report.budgets}
    assert set(rows) == {("team", "vision"), ("account", A), ("account", B)}
    assert rows[("account", B)].spent_usd == pytest.approx(18 * 6.20, abs=0.01)
    assert rows[("account", A)].spent_usd == pytest.approx(rows[("team", "vision")].spent_usd, abs=0.01)
    table = report.budgets_table()
    assert table.columns[:2] == ["scope", "name"]
    assert f"Budget: account {A} is on course" in render_html(report)
    # without account budgets the table is exactly the team table it always was
    teams_only = report_over(org_ledger(), parse_policy({"budgets": {"teams": {"vision": 100.0}}}))
    assert teams_only.budgets_table().columns[0] == "team"


@pytest.mark.parametrize(
    ("accounts", "message"),
    [
        ({"12345": 10.0}, "budgets.accounts.12345.[key]: String should match pattern"),
        ({A: 0}, f"budgets.accounts.{A}: Input should be greater than 0"),
        ({A: 2e9}, f"budgets.accounts.{A}: Input should be less than or equal to 1000000000"),
    ],
)
def test_bad_account_budgets_name_the_field(accounts: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=re.escape(message)):
        parse_policy({"budgets": {"accounts": accounts}})


# --- the CLI filters -----------------------------------------------------------------------------------------------


def test_filters_take_repeated_flags_and_comma_lists() -> None:
    accounts, regions = parse_origins([f"{A},{B}", A], ["us-west-2", "eu-west-1 , us-east-1"])
    assert accounts == {A, B} and regions == {"us-west-2", "eu-west-1", "us-east-1"}
    assert parse_origins(None, None) == (frozenset(), frozenset())


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--only-account", "12345678901"], "--only-account '12345678901': an AWS account id is 12 digits"),
        (["--only-account", f"{A},x"], "--only-account 'x'"),
        (["--only-region", "moon-1"], "--only-region 'moon-1': not a region name such as us-east-1"),
        (["--only-region", "US-EAST-1"], "--only-region 'US-EAST-1'"),
        (["--region", "nowhere"], "--region 'nowhere'"),
    ],
)
def test_a_bad_account_or_region_is_one_line_and_exit_2(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["ledger", "export", "--table", "governor-ledger", "--out", str(tmp_path / "x.jsonl"), *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_filtering_keeps_an_accounts_decisions_and_its_instances_sessions() -> None:
    items = org_ledger()
    kept, unplaced = filter_origins(items, frozenset({B}), frozenset())
    assert {i.get("resource", i.get("instance_id")) for i in kept} == {"i-0b22"}
    assert any(i.get("kind") == "session" for i in kept)
    assert {i.get("kind") for i in unplaced} >= {"interruption"}  # nowhere attributable: left out, counted
    assert filter_origins(items, frozenset(), frozenset({"eu-west-1"}))[0] == []
    assert filter_origins(items, frozenset(), frozenset()) == (items, [])


def test_report_narrows_the_ledger_to_an_account(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("\n".join(json.dumps(i) for i in org_ledger()), encoding="utf-8")
    logs = tmp_path / "logs"
    logs.mkdir()
    start, end = at(0), (dt.datetime.fromisoformat(at(0)) + dt.timedelta(days=1)).isoformat()
    args = ["report", "--logs", str(logs), "--ledger", str(ledger), "--start", start, "--end", end]
    assert main([*args, "--out", str(tmp_path / "all")]) == 0
    whole = capsys.readouterr().out
    assert f"account {A} us-east-1" in whole and f"account {B} us-west-2" in whole
    assert main([*args, "--out", str(tmp_path / "b"), "--only-account", B]) == 0
    narrowed = capsys.readouterr().out
    assert "GPU-hours 144.0" in narrowed and f"account {A}" not in narrowed
    assert f"ledger narrowed to {B}" in narrowed


def test_sessions_outside_every_decision_are_unknown() -> None:
    lone = _session("i-0zzz", "g5.xlarge", 1, 1.0, "nlp", "eve", start=at(1), end=at(2))
    assert origin_of(lone, origins(org_ledger())) == ("unknown", "unknown")


# --- the demo's flags ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accounts", "regions", "instances", "message"),
    [
        (0, 1, 20, "--accounts 0: simulate 1 to 8 member accounts"),
        (9, 1, 20, "--accounts 9"),
        (3, 5, 20, "--regions 5: simulate 1 to 4 regions"),
        (3, 2, 5, "--instances 5: at least one per account and region (3 x 2)"),
    ],
)
def test_demo_accounts_and_regions_are_checked_before_anything_starts(
    accounts: int, regions: int, instances: int, message: str, tmp_path: Path
) -> None:
    import argparse

    from governor_cli.commands.demo import check_options

    args = argparse.Namespace(
        instances=instances, hours=2.0, port=0, out=str(tmp_path), cdk_out=str(tmp_path), skip_synth=True
    )
    args.accounts, args.regions = accounts, regions
    with pytest.raises(UsageError, match=re.escape(message)):
        check_options(args)
    args.accounts, args.regions, args.instances = 3, 2, 6
    check_options(args)


def test_the_demos_targets_are_member_accounts_in_every_region_or_the_hub_alone(tmp_path: Path) -> None:
    from governor_cli.demo.run import HUB_ACCOUNT, DemoOptions, demo_sites

    policy = parse_policy({})
    single = demo_sites(DemoOptions(policy=policy, out=tmp_path))
    assert [(s.account, s.region, s.member) for s in single] == [(HUB_ACCOUNT, "us-east-1", False)]
    org = demo_sites(DemoOptions(policy=policy, out=tmp_path, accounts=3, regions=2))
    assert [(s.account, s.region) for s in org] == [
        (account, region)
        for account in ("111111111111", "222222222222", "333333333333")
        for region in ("us-east-1", "us-west-2")
    ]
    assert all(s.member and s.trail.account == s.account and s.trail.region == s.region for s in org)


def test_an_account_budget_alert_names_the_account_and_is_raised_once() -> None:
    from governor.report.handler import handle
    from governor_cli.testing.memory import MemoryLedger
    from tests.unit.test_report_handler import RUN_AT, scheduled, setup

    rt, aws = setup(enforce=False)
    rt.ledger = MemoryLedger()
    for n, item in enumerate(org_ledger()):
        rt.ledger.put_item(item["kind"], f"k{n}", item)
    rt.policy.budgets.accounts.update({B: 120.0, A: 1_000_000.0})
    handle(scheduled(), rt, aws, RUN_AT)
    alerts = [f for f in rt.sink.findings if f.rule == "budgets.threshold"]  # type: ignore[attr-defined]
    assert [(f.account, f.team, f.resource) for f in alerts] == [(B, None, f"budget:account:{B}")]
    assert alerts[0].title.startswith(f"Account {B} has spent") and "budgets.accounts" in alerts[0].detail
    again = scheduled()
    again["id"] = "sched-again"
    handle(again, rt, aws, RUN_AT)
    assert len([f for f in rt.sink.findings if f.rule == "budgets.threshold"]) == 1  # type: ignore[attr-defined]
