"""Issue 48 on the report: one fact told once — unmonitored time is its own band, every cost finding has its money
at stake in one format, "Needs attention" is ordered critical first then by money."""

from __future__ import annotations

import json
from typing import Any

import pytest

from governor.policy import Policy
from governor.report.build import build_report
from governor.report.render.html_page import render_html
from tests.unit.test_report import DAY, NEXT_DAY, _idle, _session, at


def report_over(items: list[dict[str, Any]], policy: Policy | None = None) -> Any:
    return build_report(
        kind="daily",
        start=DAY,
        end=NEXT_DAY,
        policy=policy or Policy(),
        audit={},
        ledger_items=items,
        now=NEXT_DAY,
    )


def test_an_instance_without_metrics_is_charted_unmonitored_never_busy() -> None:
    """Two GPU instances the sweep judged every hour as "unmonitored" (no usable data): all their GPU-hours are the
    unmonitored band, in the chart and in report.json; main counted each such decision as a sample, so drew them busy."""
    items: list[dict[str, Any]] = [
        _session("i-dark1", "g5.12xlarge", 4, 5.672, "vision", "ana", start=at(0), end=None),
        _session("i-dark2", "g5.xlarge", 1, 1.006, "vision", "bo", start=at(0), end=None),
        _session("i-lit", "g5.xlarge", 1, 1.006, "speech", "cy", start=at(0), end=None),
    ]
    for hour in range(24):
        items.append(_idle("i-dark1", at(hour + 0.1), "unmonitored", None))  # type: ignore[arg-type]
        items.append(_idle("i-dark2", at(hour + 0.1), "unmonitored", None))  # type: ignore[arg-type]
        items.append(_idle("i-lit", at(hour + 0.1), "busy", 80.0))
        items.append(_idle("i-lit", at(hour + 0.6), "busy", 80.0))
    report = report_over(items)
    usage = json.loads(report.model_dump_json())["charts"]["usage"]
    assert sum(b["unmonitored"] for b in usage) == pytest.approx(24 * 5, abs=0.01)
    assert sum(b["busy"] for b in usage) == pytest.approx(24, abs=0.01)
    assert all(b["unmonitored"] == pytest.approx(2.5, abs=0.01) for b in usage)  # every bucket, not only the first


def _launch_record(instance: str, creator: str) -> dict[str, Any]:
    """Lifecycle's decision at launch, as the demo's ledger holds it: the creator recorded from CloudTrail."""
    return {
        "kind": "decision",
        "policy": "lifecycle",
        "verdict": "act",
        "resource": instance,
        "at": at(0),
        "rule": "lifecycle.launch",
        "severity": "info",
        "reasons": ["launched"],
        "actions": [{"type": "record", "item": "launch", "creator": creator, "enforced": True}],
        "evidence": {},
    }


def test_one_owner_per_resource_in_the_findings_and_the_offenders() -> None:
    """Issue 48 item 5: the idle sweep read tags only, so its decision says owner "unknown" while the session (and
    the offenders' table) name the creator; another instance's creator is only in lifecycle's launch record. The
    report names each by its record (``facts.ledger_facts``): the same person in the findings and the offenders."""
    dara = "arn:aws:iam::123456789012:user/dara"
    chen = "arn:aws:sts::123456789012:assumed-role/ml-engineer/chen"
    items: list[dict[str, Any]] = [
        {**_session("i-dara", "g5.xlarge", 1, 1.006, "research", dara, start=at(0)), "ownership_source": "creator"},
        _session("i-chen", "g5.xlarge", 1, 1.006, "vision", "", start=at(0)),
        _launch_record("i-chen", chen),
    ]
    for instance in ("i-dara", "i-chen"):
        items += [_idle(instance, at(h), "idle", 0.0, owner="unknown") for h in range(1, 6)]
        items.append(_idle(instance, at(6), "warned", 0.0, idle_since=at(1), owner="unknown"))
    report = report_over(items)
    owners = {f.resource: f.owner for f in report.open_findings}
    assert owners == {"i-dara": "dara", "i-chen": "chen"}  # and no "untagged" finding for chen's instance
    offenders = {r["instance_id"]: r["owner"] for r in report.cost.offenders.rows}
    assert offenders["i-dara"] == "dara"


def test_every_surface_of_one_run_says_what_the_record_says() -> None:
    """Issue 48 item 1: one record per resource per run (report.json ``resources``, resources.csv), and every
    surface (findings, the HTML page, the to-do list Slack and email carry, the notifier's Slack and email) tells
    its owner, money at stake and price as the record does."""
    from governor.notifier.domain import MergedFinding
    from governor.notifier.render import email_for, slack_messages, slack_people
    from governor.report.render.format import todo_items
    from tests.unit.test_notify import finding

    dara = "arn:aws:sts::123456789012:assumed-role/ml-engineer/dara"
    items: list[dict[str, Any]] = [
        {**_session("i-dara", "p5.48xlarge", 8, 55.04, "research", dara, start=at(0)), "ownership_source": "creator"},
        *(_idle("i-dara", at(h), "idle", 0.0, owner="unknown") for h in range(1, 6)),
        _idle("i-dara", at(6), "warned", 0.0, idle_since=at(1), owner="unknown"),
    ]
    report = report_over(items)
    rows = {r["resource"]: r for r in json.loads(report.model_dump_json()).get("resources", {}).get("rows", [])}
    assert "i-dara" in rows, "report.json has no record of the resource"
    record = rows["i-dara"]
    assert (record["owner"], record["owner_proof"], record["team"]) == ("dara", "creator", "research")
    assert (record["usd_per_hour"], record["price_basis"], record["usd_per_day"]) == (55.04, "session", 1320.96)
    from governor.domain.facts import per_day_text
    from governor.report.render.csv_files import resources_csv

    assert "i-dara,dara,creator,research,p5.48xlarge" in resources_csv(report)

    [found] = [f for f in report.open_findings if f.resource == "i-dara"]
    assert (found.owner, found.team, found.usd_per_day) == ("dara", "research", record["usd_per_day"])
    money = per_day_text(record["usd_per_day"])
    assert money == "$1,320.96/day"
    assert "(dara, research)" in todo_items(report)[0] and f"{money} at stake" in todo_items(report)[0]
    page = render_html(report)
    assert f"<td class='num' data-label='At stake'>{money}</td>" in page and "dara <span class='muted'>" in page

    message = MergedFinding(finding(owner=dara, team="research", resource="i-dara"))
    slack = json.dumps(slack_messages([message], slack_people({"U0DARA00": "dara@demo.example"})))
    assert "*Owner* <@U0DARA00> (dara)" in slack
    assert "Owner: dara\n" in email_for([message]).text
