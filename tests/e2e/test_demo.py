"""A shortened demo, end to end on the local emulator: what was warned, stopped, revoked, notified and reported."""

from __future__ import annotations

import datetime as dt
import json
import re
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from governor.interactions.domain import KEEP_HOURS, STOP_NOW
from governor.notifier.digest import DIGEST_TITLE
from governor.policy import load_policy
from governor_cli.demo.capabilities.idle import stopped_by_governor
from governor_cli.demo.run import (
    DEMO_UNUSED,
    DemoOptions,
    DemoResult,
    run_demo,
    summary_lines,
)
from governor_cli.main import main
from tests.conftest import ROOT
from tests.e2e import samples

pytestmark = pytest.mark.e2e


def _run(out: Path, enforce: bool, clicks: bool = True) -> DemoResult:
    """The README's sample day (tests/e2e/samples.py), enforcing or not, with or without the owners' clicks."""
    return run_demo(replace(samples.options(out), enforce=enforce, clicks=clicks))


@pytest.fixture(scope="module")
def enforced(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return _run(tmp_path_factory.mktemp("demo-out"), enforce=True)


@pytest.fixture(scope="module")
def enforced_without_clicks(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    """Nobody clicks Keep or Stop now: what the idle policy alone reclaims."""
    return _run(tmp_path_factory.mktemp("demo-no-clicks"), enforce=True, clicks=False)


@pytest.fixture(scope="module")
def report_only(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return _run(tmp_path_factory.mktemp("demo-report-only"), enforce=False)


@pytest.fixture(scope="module")
def report_only_without_clicks(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    """What the report-only run says it would reclaim when nobody clicks: a report-only Keep is remembered as a
    snooze (issue 37), so the clicked run would reclaim less than the enforced run without clicks."""
    return _run(tmp_path_factory.mktemp("demo-report-only-no-clicks"), enforce=False, clicks=False)


def _decisions(result: DemoResult, policy: str) -> list[dict]:
    return [d for d in result.decisions if d.get("kind") == "decision" and d.get("policy") == policy]


def test_only_truly_idle_instances_are_warned_then_stopped(enforced: DemoResult) -> None:
    assert enforced.stopped, "the idle policy stopped nothing"
    # idle boxes, abandoned notebooks and training jobs that finished; never a server or a box it cannot see
    assert {enforced.kinds[i] for i in enforced.stopped} <= {"idle", "notebook", "training"}
    warned = {d["resource"] for d in _decisions(enforced, "idle") if any(a["type"] == "warn" for a in d["actions"])}
    assert set(enforced.stopped) <= warned, "an instance was stopped without a warning first"
    working = {i for i, kind in enforced.kinds.items() if kind in ("inference", "unmonitored")}
    assert not working & set(enforced.stopped)
    acted = {
        d["resource"]: d["evidence"]["window_end"]
        for d in _decisions(enforced, "idle")
        if d["rule"] in ("idle.acted", "idle.stop-now")  # the sweep's stops, and Stop now from Slack
    }
    for instance_id in enforced.stopped:  # ground truth: nothing was working when it was stopped
        stopped_at = dt.datetime.fromisoformat(acted[instance_id]).timestamp()
        assert not enforced.truth[instance_id].working_at(stopped_at), (instance_id, enforced.kinds[instance_id])


def test_world_open_ssh_and_training_port_to_cidr_are_revoked(enforced: DemoResult) -> None:
    assert enforced.open_ingress == []
    revoked = [a for d in _decisions(enforced, "network") for a in d["actions"] if a["type"] == "revoke_ingress"]
    assert any(a.get("enforced") for a in revoked)


def test_keys_are_rotated_and_the_old_access_key_deactivated(enforced: DemoResult) -> None:
    assert enforced.rotation_enabled
    assert enforced.deactivated_keys == 1


def test_spot_warning_sent_a_checkpoint_and_findings_reached_the_notifier(enforced: DemoResult) -> None:
    checkpoints = [a for d in _decisions(enforced, "spot") for a in d["actions"] if a["type"] == "checkpoint"]
    assert checkpoints and all(a["enforced"] for a in checkpoints)
    policies = {f.get("policy") for f in enforced.notified}
    assert {"idle", "network", "keys", "spot"} <= policies


def test_report_counts_the_incidents_and_the_savings(enforced: DemoResult) -> None:
    security = {q["name"]: q["count"] for q in enforced.report["security"]}
    assert security["world_open_ingress"] == 1
    assert security["gpu_instance_launches"] == 12
    assert enforced.report["cost"]["idle_gpu_hours_reclaimed"] > 0
    assert enforced.report["cost"]["savings_usd"] > 0
    html = (enforced.out / "report.html").read_text()
    assert "world_open_ingress" in html
    assert list(Path(enforced.out / "cloudtrail").rglob("*.json.gz"))


def test_report_only_shows_what_enforcing_reclaims(
    report_only_without_clicks: DemoResult, enforced_without_clicks: DemoResult
) -> None:
    would, done = report_only_without_clicks.report["cost"], enforced_without_clicks.report["cost"]
    assert report_only_without_clicks.stopped == [] and done["idle_actions"] > 0
    assert would["would_reclaim_gpu_hours"] > 0 and would["would_save_usd"] > 0
    assert would["would_reclaim_gpu_hours"] == done["idle_gpu_hours_reclaimed"]
    assert would["would_save_usd"] == done["savings_usd"]
    assert would["idle_would_act"] == done["idle_actions"]
    # what the stops give back is what is no longer billed
    assert round(would["gpu_hours_total"] - done["gpu_hours_total"], 2) == done["idle_gpu_hours_reclaimed"]
    phrase = f"would reclaim {would['would_reclaim_gpu_hours']:,.1f} GPU-hours, ${would['would_save_usd']:,.2f}"
    assert phrase in (report_only_without_clicks.out / "report.html").read_text()
    report_messages = sorted((report_only_without_clicks.out / "slack").glob("*.json"))[
        -report_only_without_clicks.report_slack_messages :
    ]
    assert any(phrase in path.read_text() for path in report_messages), "the report's Slack message lacks the figure"
    summary = "\n".join(summary_lines(report_only_without_clicks))
    assert f"{would['would_reclaim_gpu_hours']:,.1f}" in summary and f"${would['would_save_usd']:,.2f}" in summary


def _at(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_every_record_message_and_chart_point_carries_the_simulated_time(report_only: DemoResult) -> None:
    start, end = report_only.start, report_only.end
    assert end - start == dt.timedelta(hours=4.5)
    stamps = [_at(d["at"]) for d in report_only.decisions if d.get("kind") == "decision"]
    assert stamps and all(start <= t <= end for t in stamps), "a ledger record is stamped outside the simulated day"
    assert (_at(report_only.report["start"]), _at(report_only.report["end"])) == (start, end)
    points = [_at(p[0]) for series in report_only.report["utilisation"].values() for p in series]
    assert min(points) < start + dt.timedelta(hours=1) and max(points) > end - dt.timedelta(hours=1)
    assert all(start <= t <= end for t in points)
    dates = [
        line.split(":", 1)[1].strip()
        for path in (report_only.out / "email").glob("*.eml")
        for line in path.read_text().splitlines()
        if line.startswith("Date:")
    ]
    from email.utils import parsedate_to_datetime

    assert dates and all(start <= parsedate_to_datetime(d) <= end for d in dates)


def test_every_message_is_delivered_and_saved(report_only: DemoResult, enforced: DemoResult) -> None:
    for result in (report_only, enforced):
        saved = sorted((result.out / "slack").glob("*.json"))
        assert len(saved) == result.slack_messages > result.report_slack_messages > 0
        assert all("blocks" in json.loads(path.read_text()) for path in saved)
        assert result.emails == len(list((result.out / "email").glob("*.eml"))) > 0
        assert result.failed_deliveries == 0 and "notifier" not in result.dead_letters


def test_summary_columns_are_aligned(report_only: DemoResult) -> None:
    lines = summary_lines(report_only)
    facts = [line for line in lines if line.startswith(("period ", "delivered ", "dead-letter queues "))]
    assert len(facts) == 3
    assert len({len(line) - len(line.split("  ", 1)[1].lstrip()) for line in facts}) == 1


def test_quiet_by_design_posts_per_channel_per_day(report_only: DemoResult) -> None:
    """Issue 37, item 4: the summary prints posts per channel per day; no report-only "would be stopped now" or
    "reported, not reclaimed" post (the digest has them); no message repeats its title or shows rule or event ids or
    a second time format; nothing about an instance after its owner clicked Keep says it would be stopped."""
    line = next(line for line in summary_lines(report_only) if line.startswith("posts per channel per day "))
    assert "governor/slack-webhook " in line and "/day (" in line
    assert sum(report_only.posts.values()) == report_only.slack_messages
    uuid = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
    posts = [json.loads(p.read_text()) for p in sorted((report_only.out / "slack").glob("*.json"))]
    notices = [m for m in posts if not m.get("replace_original")][: -report_only.report_slack_messages or None]
    assert notices
    for message in notices:
        text = json.dumps(message["blocks"])
        assert "report-only: not done)" not in message["text"] and "reported, not reclaimed" not in message["text"]
        named = re.sub(r"(KMS key |key/)[0-9a-f-]{36}", "", text)  # a KMS key's id is its name, not an event id
        assert not uuid.search(named) and "idle.warned" not in text and not re.search(r"\dT\d\d:\d\d", text)
        head = message["blocks"][0]["text"]["text"]
        if not head.startswith("GPU Fleet Governor:"):  # one finding: its title is the header, said once
            assert text.count(json.dumps(head)[1:-1]) == 1
    kept = [c for c in report_only.clicks if c.get("button") == KEEP_HOURS]
    for click in kept:  # report-only: no tag, but the sweeps read the Keep as the snooze it would have been
        clicked, until = _at(click["at"]), _at(click["until"])
        during = [
            d
            for d in report_only.decisions
            if d.get("kind") == "decision"
            and d.get("policy") == "idle"
            and d.get("resource") == click["instance"]
            and clicked < _at(d["at"]) < until
        ]
        assert all(d["evidence"]["status"] == "snoozed" for d in during), "a kept instance was judged"
        # issue 48: the click may be on the digest of the day's close, after the last sweep
        assert during or clicked >= report_only.end - dt.timedelta(minutes=15)


def test_a_channel_gets_digests_and_what_is_due_and_the_report_email_is_sent_within_60_kb(
    report_only: DemoResult,
) -> None:
    """Issue 48: besides the report and the answers to clicks, a channel gets only its digests (one per schedule tick
    and the day's close) and what is due now (interruption warnings); the report's email is sent, at most 60 KB."""
    posts = [json.loads(p.read_text()) for p in sorted((report_only.out / "slack").glob("*.json"))]
    notices = [m for m in posts if not m.get("replace_original")][: -report_only.report_slack_messages or None]
    digests = [m for m in notices if m["text"].startswith(DIGEST_TITLE)]
    assert 1 <= len(digests) <= 2  # 4.5 h: at most one tick of the 8-hourly schedule, and the day's close
    assert all("interruption" in m["text"].lower() for m in notices if m not in digests), [m["text"] for m in notices]
    eml = Path(report_only.report_email_file)
    assert eml.exists() and eml.stat().st_size == report_only.report_email_bytes <= 60 * 1024
    assert "Subject: GPU fleet report" in eml.read_text()


def test_idle_warnings_ping_their_owner_with_a_slack_mention(report_only: DemoResult) -> None:
    """Issue 37, item 3: "bo: it would be stopped…" never notified bo; the owner's Slack id comes from the policy."""
    posts = [json.loads(p.read_text()) for p in sorted((report_only.out / "slack").glob("*.json"))]
    texts = [(m.get("text", ""), json.dumps(m)) for m in posts]
    warnings = [w for t, w in texts if "Idle GPU instance" in t or "idle GPU instances of" in t]
    # issue 48: a report-only warning waits for the channel's digest, which names each owner the same way (one name)
    digests = [w for t, w in texts if t.startswith(DIGEST_TITLE) and "Idle GPU instance" in w]
    mentioned = [w for w in [*warnings, *digests] if re.search(r"<@UDEMO[A-Z]+> \([a-z]+\)", w)]
    singles = [w for w in mentioned if "idle GPU instances of" not in w and w not in digests]  # alone: pinged first
    assert mentioned and all(re.search(r"<@UDEMO[A-Z]+>: it would be", w) for w in singles)
    # an owner the policy knows is always pinged; a recorded creator or a cluster's node owner is named, not pinged
    assert not [w for w in [*warnings, *digests] if "@demo.example" in w and "<@UDEMO" not in w]


def test_a_taken_port_exits_2_with_a_message(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["demo", "--skip-synth", "--port", str(port), "--out", str(tmp_path)])
    assert code == 2
    assert f"port {port}" in capsys.readouterr().err


def test_a_failed_delivery_is_counted_and_dead_lettered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from governor_cli.demo.run import Simulation

    monkeypatch.setattr(Simulation, "connect_notifier", lambda self, url: None)  # no webhook secret, no SES sender
    options = DemoOptions(policy=load_policy(ROOT / "governor.yaml"), out=tmp_path, instances=2, hours=1.5)
    result = run_demo(options)
    from governor.domain.decision import Finding
    from governor.notifier.domain import posts_now

    assert result.notified, "nothing was routed to the notifier"
    now = options.policy.notifications
    posted = [f for f in result.notified if posts_now(Finding.model_validate(f), now)]
    # what posts at once fails at once; the rest waits for the channel's digest, whose post fails in its turn
    assert result.failed_deliveries >= max(1, len(posted))
    assert result.dead_letters.get("notifier", 0) > 0
    assert len(result.delivery_errors) == result.failed_deliveries
    assert any("email" in error for error in result.delivery_errors), result.delivery_errors[:3]  # unverified sender
    assert any(
        line.startswith("delivered ") and f"failed: {result.failed_deliveries}" in line
        for line in summary_lines(result)
    )


def test_slack_buttons_keep_one_instance_and_stop_another_at_once(enforced: DemoResult) -> None:
    clicks = {c["button"]: c for c in enforced.clicks}
    keep, stop = clicks[KEEP_HOURS], clicks[STOP_NOW]
    assert keep["http"] == stop["http"] == 200 and keep["instance"] != stop["instance"]
    assert keep["status"] == "kept" and stop["status"] == "stopped"
    assert not stopped_by_governor(enforced, keep["instance"], _at(keep["until"]).isoformat())
    assert stop["instance"] in enforced.stopped
    kept = [d for d in _decisions(enforced, "interactions") if d["rule"] == "interactions.keep"]
    assert kept[0]["evidence"]["clicked_by"] == f"{keep['person']}@demo.example"
    (stopped,) = [d for d in _decisions(enforced, "idle") if d["rule"] == "idle.stop-now"]
    assert stopped["evidence"]["requested_by"] == f"{stop['person']}@demo.example"
    assert stopped["evidence"]["done"][0] == "stopped"
    summary = "\n".join(summary_lines(enforced))
    assert f"Stop now on {stop['instance']} by {stop['person']}: stopped at once" in summary
    assert "not stopped while kept" in summary


def test_report_only_clicks_are_recorded_and_change_nothing(report_only: DemoResult) -> None:
    assert {c["status"] for c in report_only.clicks} == {"report-only"}
    assert report_only.stopped == []


def test_reserved_capacity_and_the_price_paid(enforced: DemoResult) -> None:
    """Issue 38 in the demo: a Capacity Block instance idle all day is never stopped and its idle hours are paid for,
    unused; the interruptible reservation's warning (AWS's sample) takes the checkpoint path; savings are priced at
    the Savings Plan's effective rate, with its source."""
    block = enforced.capacity_block
    assert block is not None and block not in enforced.stopped
    cost = enforced.report["cost"]
    rows = cost["paid_unused"]["rows"]
    assert [row["instance_id"] for row in rows if row["instance_id"].startswith("i-")] == [block]
    assert cost["paid_unused_gpu_hours"] > 0
    # the On-Demand Capacity Reservation nobody launches into: read through the real adapter, priced a day, its owner
    (unused,) = [row for row in rows if row["reservation_id"] == DEMO_UNUSED]
    assert unused["instance_id"] == "(none: 2 of 2 unused)" and unused["instance_type"] == "p4d.24xlarge"
    assert unused["usd_per_day"] > 0 and unused["owner"] == "bo" and unused["idle_gpu_hours"] > 0
    summary = "\n".join(summary_lines(enforced))
    assert f"unused reservation {DEMO_UNUSED}" in summary and f"${unused['usd_per_day']:,.2f}/day" in summary
    lent = enforced.interruptible
    warned = [d for d in _decisions(enforced, "spot") if d["resource"] == lent]
    assert any(d["rule"] == "capacity-reservation-interruption" and d["verdict"] == "act" for d in warned)
    assert any(a["type"] == "checkpoint" and a["enforced"] for d in warned for a in d["actions"])
    sources = set(cost["price_sources"].values())
    # one rate per instance (issue 48): what the account pays for an On-Demand type, a Spot instance its own price
    assert sources and all(s.startswith(("Cost Explorer amortised cost", "spot price recorded")) for s in sources)
    assert "savings priced at" in (enforced.out / "report.html").read_text()


def test_the_eks_node_idle_by_dcgm_is_warned_then_drained_through_its_node_pool(
    enforced: DemoResult, report_only: DemoResult
) -> None:
    """The Karpenter GPU node, idle by its DCGM series, is warned, then (enforcing) cordoned, its idle pod evicted
    (the DCGM exporter's DaemonSet pod stays) and its NodeClaim deleted through the cluster's API, which the idle
    function found by DescribeCluster on the emulated EKS; Karpenter then terminates it. Report-only writes nothing."""
    from governor_cli.demo.capabilities.idle.eks import CLUSTER, IDLE_POD, NODE, NODE_CLAIM, NODE_POOL

    eks = enforced.eks
    assert eks["writes"] == [
        f"PATCH /api/v1/nodes/{NODE}",
        f"POST /api/v1/namespaces/{IDLE_POD[0]}/pods/{IDLE_POD[1]}/eviction",
        f"DELETE /apis/karpenter.sh/v1/nodeclaims/{NODE_CLAIM}",
    ]
    assert eks["cordoned"] and eks["terminated_at"]
    node = [d for d in _decisions(enforced, "idle") if d["resource"] == eks["instance"]]
    warned = min(d["at"] for d in node if any(a["type"] == "warn" for a in d["actions"]))
    # the warning names the path too (issue 48: via, group); the drain is the reclaim action taken through it
    drained = [
        d
        for d in node
        if any(a.get("via") == "kubernetes" and a.get("enforced") and a["type"] != "warn" for a in d["actions"])
    ]
    assert len(drained) == 1 and warned < drained[0]["at"]
    assert drained[0]["evidence"]["done"][0].startswith(f"cordon {NODE}; evict 1 pods; delete NodeClaim {NODE_CLAIM}")
    summary = "\n".join(summary_lines(enforced))
    assert f"({CLUSTER}, node pool {NODE_POOL}): idle by DCGM, warned" in summary
    assert f"cordoned, evicted {IDLE_POD[0]}/{IDLE_POD[1]}, NodeClaim deleted; Karpenter terminated it" in summary

    assert report_only.eks["writes"] == [] and not report_only.eks["terminated_at"]
    assert "would cordon, drain and delete its NodeClaim" in "\n".join(summary_lines(report_only))


def test_an_owner_slack_users_leaves_out_is_found_with_users_lookup_by_email(report_only: DemoResult) -> None:
    """Issue 37: the demo's policy lists every person in slack_users but one; the notifier asks Slack's
    users.lookupByEmail (bot token, the capture endpoint answering as Slack's Web API) and mentions them by that id."""
    from governor_cli.demo.capabilities.interactions import LOOKED_UP
    from governor_cli.demo.capabilities.interactions.slack_app import slack_user

    address = f"{LOOKED_UP}@demo.example"
    assert f"users.lookupByEmail {address}" in report_only.slack_api_calls
    assert report_only.slack_api_calls.count(f"users.lookupByEmail {address}") == 1  # cached per container
    posts = [json.loads(p.read_text()) for p in sorted((report_only.out / "slack").glob("*.json"))]
    warnings = [m for m in posts if "Idle GPU instance" in m.get("text", "") or "idle GPU instances of" in m["text"]]
    warnings += [m for m in posts if m.get("text", "").startswith(DIGEST_TITLE)]  # issue 48: held, then digested
    # issue 48: one name everywhere, so the message names the person, and mentions the id Slack answered
    assert any(f"<@{slack_user(LOOKED_UP)}>" in json.dumps(m) for m in warnings)
    line = next(line for line in summary_lines(report_only) if line.startswith("Slack Web API (bot token) "))
    assert "users.lookupByEmail" in line and address in line


@pytest.mark.parametrize("page", samples.PAGES, ids=lambda page: page.name)
def test_the_sample_the_docs_show_is_what_the_demo_prints(report_only: DemoResult, page: Path) -> None:
    """Issue 48: the README's sample output comes from a run. Every figure of the page's block is the report-only
    day's own (only dates, clock times and instance ids may differ); `python -m tests.e2e.samples` rewrites it."""
    assert samples.comparable(samples.shown(page)) == samples.comparable(samples.text(report_only))


def test_paying_twice_and_a_stopped_instance_still_billing_are_found_with_their_dollars(
    report_only: DemoResult,
) -> None:
    """Issue 49, items 1 and 2: the demo's targeted reservation beside an On-Demand instance of its match, and its GPU
    instance stopped before the day with a volume and an Elastic IP, are in the summary and the report with dollars."""
    summary = "\n".join(summary_lines(report_only))
    assert re.search(r"paying twice +cr-\S+ unused beside On-Demand i-\S+.*: \$[\d,.]+/day wasted", summary)
    assert re.search(r"stopped, still billing +i-\S+ \(g5\.xlarge\): \$[\d,.]+/month \(\$[\d,.]+/day\)", summary)
    rows = {row["rule"]: row for row in report_only.report["findings"] if row["rule"].startswith("idle.")}
    assert rows["idle.paying-twice"]["usd_per_day"] > 0 and rows["idle.stopped-billing"]["usd_per_day"] > 0
    assert report_only.stopped == []  # the instance stopped before the day is not one the day stopped
