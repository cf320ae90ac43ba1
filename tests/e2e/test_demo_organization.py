"""The demo across member accounts and regions (issue 23): the hub's functions act in each account through its spoke
role, and the summary and the report break the day down by account and region, adding up to the totals.

Enforcing, so "acted on in that account" is visible in the emulator: each account's stopped instances are read back
with that account's own session (moto keeps resources per account), never the hub's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from governor.policy import load_policy
from governor_cli.demo.run import (
    HUB_ACCOUNT,
    DemoOptions,
    DemoResult,
    account_figures,
    member_accounts,
    run_demo,
    summary_lines,
)
from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

ACCOUNTS, REGIONS = 2, 2


@pytest.fixture(scope="module")
def org_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    options = DemoOptions(
        policy=load_policy(ROOT / "governor.yaml"),
        out=tmp_path_factory.mktemp("demo-org"),
        enforce=True,
        instances=8,
        hours=3.0,
        accounts=ACCOUNTS,
        regions=REGIONS,
    )
    return run_demo(options)


def test_every_account_and_region_holds_its_own_share_of_the_fleet(org_demo: DemoResult) -> None:
    sites = {(s["account"], s["region"]) for s in org_demo.sites}
    assert sites == {(a, r) for a in member_accounts(ACCOUNTS) for r in ("us-east-1", "us-west-2")}
    assert HUB_ACCOUNT not in {a for a, _ in sites}
    launched = [i for s in org_demo.sites for i in s["launched"]]
    assert len(launched) == len(set(launched)) == 8 and all(s["launched"] for s in org_demo.sites)
    assert org_demo.roles_assumed >= len(sites)  # the governor reached them through the spoke role


def test_each_accounts_instances_were_stopped_in_that_account(org_demo: DemoResult) -> None:
    assert org_demo.stopped, "the idle policy stopped nothing"
    assert org_demo.hub_instances == 0  # nothing was launched, or relaunched, in the hub's own account
    for site in org_demo.sites:
        assert set(site["stopped"]) <= set(site["launched"])  # read back in that account: only its own instances
    stops = {
        d["resource"]: (d["account"], d["region"])
        for d in org_demo.decisions
        if d.get("kind") == "decision"
        and d.get("policy") == "idle"
        and any(str(x).startswith(("stopped", "terminated")) for x in (d.get("evidence") or {}).get("done") or [])
    }
    for site in org_demo.sites:
        for instance in site["stopped"]:
            assert stops[instance] == (site["account"], site["region"])  # the ledger says where it acted


def test_every_decision_is_stamped_with_a_member_account(org_demo: DemoResult) -> None:
    decisions = [d for d in org_demo.decisions if d.get("kind") == "decision" and d.get("policy") != "notifications"]
    origins = {(d.get("account"), d.get("region")) for d in decisions}
    assert origins <= {(s["account"], s["region"]) for s in org_demo.sites} | {(HUB_ACCOUNT, "us-east-1")}
    per_site = {(d.get("account"), d.get("region")) for d in decisions if d.get("policy") in ("idle", "network")}
    assert per_site == {(s["account"], s["region"]) for s in org_demo.sites}


def test_per_account_figures_add_up_to_the_totals(org_demo: DemoResult) -> None:
    cost = org_demo.report["cost"]
    rows = cost["by_account"]["rows"]
    members = {(r["account"], r["region"]) for r in rows if r["account"] != HUB_ACCOUNT}
    assert members == {(s["account"], s["region"]) for s in org_demo.sites}
    # the hub's own row holds only what its functions decided (the notifier's deliveries), never fleet spend
    assert all(r["gpu_hours"] == 0 for r in rows if r["account"] == HUB_ACCOUNT)
    for column, total in (
        ("gpu_hours", cost["gpu_hours_total"]),
        ("cost_usd", cost["cost_total_usd"]),
        ("idle_gpu_hours", cost["idle_gpu_hours_detected"]),
        ("reclaimed_gpu_hours", cost["idle_gpu_hours_reclaimed"]),
    ):
        assert sum(r[column] for r in rows) == pytest.approx(total, abs=0.05 * len(rows)), column
    assert cost["gpu_hours_total"] > 0 and cost["idle_gpu_hours_reclaimed"] > 0
    figures = account_figures(org_demo)
    assert sum(f["stopped"] for f in figures) == len(org_demo.stopped)
    assert sum(f["instances"] for f in figures) == 8
    to_act = [d for d in org_demo.decisions if d.get("kind") == "decision" and d.get("verdict") == "act"]
    assert sum(f["decisions_to_act"] for f in figures) == len(to_act)  # the summary's per-policy count, per account


def test_summary_and_report_break_the_day_down_by_account(org_demo: DemoResult) -> None:
    lines = summary_lines(org_demo)
    for site in org_demo.sites:
        assert any(line.startswith(site["account"]) and site["region"] in line for line in lines)
    assert any(line.startswith("all accounts") for line in lines)
    html = (org_demo.out / "report.html").read_text(encoding="utf-8")
    assert "Spend by account and region" in html
    assert (org_demo.out / "gpu_hours_by_account.csv").is_file()


def test_the_ledger_export_file_filters_by_account(org_demo: DemoResult, tmp_path: Path) -> None:
    from governor_cli.commands.ledger import filter_origins, parse_origins

    first = member_accounts(ACCOUNTS)[0]
    accounts, regions = parse_origins([first], ["us-west-2"])
    kept, _ = filter_origins(org_demo.decisions, accounts, regions)
    assert kept and all(d.get("account", first) == first for d in kept)
    sessions = [d for d in kept if d.get("kind") == "session"]
    site = next(s for s in org_demo.sites if (s["account"], s["region"]) == (first, "us-west-2"))
    assert sessions and {d["instance_id"] for d in sessions} <= set(site["launched"])


def test_usage_sessions_carry_their_account_and_each_reconcile_keeps_to_its_own(org_demo: DemoResult) -> None:
    """Each site's lifecycle reconcile keeps to its own sessions: every session names the account and region its
    instance was launched in, and no site's reconcile decides about another site's instance (before, each one closed
    every other site's sessions as "no longer running")."""
    where = {i: (s["account"], s["region"]) for s in org_demo.sites for i in s["launched"]}
    sessions = [d for d in org_demo.decisions if d.get("kind") == "session"]
    assert sessions
    for session in sessions:
        assert (session["account"], session["region"]) == where[session["instance_id"]]
    reconciled = [d for d in org_demo.decisions if d.get("rule") == "lifecycle.reconcile"]
    assert all(where[d["resource"]] == (d["account"], d["region"]) for d in reconciled)
