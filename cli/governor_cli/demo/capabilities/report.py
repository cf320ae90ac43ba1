"""The report's scenarios: one scheduled tick, one report archived and sent; in the demo, each simulated team's
budget, ``governor report`` over the day's trail and ledger with its Slack messages posted, its summary row and the
organisation demo's per-account attribution."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from governor_cli.testing.deployment import REPORTS_BUCKET
from governor_cli.testing.events import scheduled
from governor_cli.testing.scenarios import Case

if TYPE_CHECKING:
    from governor.policy import Policy
    from governor_cli.demo.run import DemoResult, Simulation
    from governor_cli.testing.scenarios import Scenarios

SOAK: dict[str, Any] = {"enforce": True}
#: The reliability deployment's archive bucket in its environment, as the stack gives it (infra/constructs/reports.py).
DEPLOYED_ENVIRONMENT = {"REPORTS_BUCKET": REPORTS_BUCKET}


def report_tick(scenarios: Scenarios, index: int) -> Case:
    # The report covers the UTC day before its event's time: the key follows that time, not a second reading
    # of the clock (which a run just before midnight would take on the other side of it)
    at = dt.datetime.now(dt.UTC).replace(microsecond=0)
    event = scheduled({"kind": "daily"}, time=at)
    start = (at - dt.timedelta(days=1)).date()
    return Case(f"daily report tick #{index}", "report", event, f"report:daily:{start:%Y-%m-%d}")


CASES = ((1, report_tick),)


# --- the demo ---------------------------------------------------------------------------------------------------

#: Each simulated team's monthly GPU budget when the policy sets none (budgets.teams): the report's budget section.
DEMO_TEAM_BUDGET_USD = 6000.0


def policy_sections(policy: Policy) -> dict[str, Any]:
    """A newcomer's first report shows the budget section: each simulated team gets a monthly budget unless the
    policy gives budgets of its own (the shipped governor.yaml gives none)."""
    from governor_cli.demo.run import TEAMS

    budgets = policy.budgets
    if not budgets.teams and not budgets.accounts:
        budgets = budgets.model_copy(update={"teams": dict.fromkeys(TEAMS, DEMO_TEAM_BUDGET_USD)})
    return {"budgets": budgets}


def finish(sim: Simulation) -> None:
    """``governor report`` over the demo's own trail and ledger for exactly the simulated period (the same code as the
    scheduled report), then its Slack messages posted to the webhook as the report Lambda posts them."""
    from governor.adapters.slack import DeliveryError, SlackWebhook
    from governor_cli.main import main

    out = sim.options.out
    start = sim.result.start.strftime("%Y-%m-%dT%H:%M:%SZ")
    end = sim.result.end.strftime("%Y-%m-%dT%H:%M:%SZ")
    policy_file = out / "policy.json"
    policy_file.write_text(json.dumps(sim.policy.model_dump(mode="json", by_alias=True)), encoding="utf-8")
    args = ["report", "--logs", str(out / "cloudtrail"), "--ledger", str(out / "ledger.jsonl"), "--out", str(out)]
    args += ["--policy", str(policy_file), "--start", start, "--end", end]
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(args)
    (out / "report.txt").write_text(buffer.getvalue(), encoding="utf-8")
    if code != 0:
        raise RuntimeError(f"governor report failed with exit code {code}: {buffer.getvalue()[-500:]}")
    sim.result.report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    messages = json.loads((out / "slack.json").read_text(encoding="utf-8"))
    assert sim.capture is not None, "the demo's capture endpoint is up for the whole run"
    try:
        sim.result.report_channel = sim.policy.notifications.slack_secret_name  # the report's route (its secret)
        channel = f"{sim.capture.url}/{sim.result.report_channel}"
        SlackWebhook(channel, label="report webhook").post_all(messages)
        sim.result.report_slack_messages = len(messages)
    except DeliveryError as error:
        sim.result.failed_deliveries += 1
        sim.result.delivery_errors.append(str(error))
    send_report_email(sim)


def send_report_email(sim: Simulation) -> None:
    """The report's email, built as the report function builds it (``governor.report.email``: the page, the chart
    inline, every table in one zip, within 60 KB) and sent through the emulated SES, so ``out/email/`` holds it."""
    from moto.backends import get_backend

    from governor.adapters.delivery import AwsOutbox
    from governor.report.email import report_email
    from governor.report.model import Report

    out, policy = sim.options.out, sim.policy
    recipients = tuple(policy.reports.email_recipients or policy.notifications.email_recipients)
    sender = policy.notifications.email_sender
    if not recipients or not sender:
        return
    report = Report.model_validate_json((out / "report.json").read_text(encoding="utf-8"))
    files = {path.name: path.read_text(encoding="utf-8") for path in sorted(out.glob("*.csv"))}
    chart = (out / report.chart_file).read_bytes() if (out / report.chart_file).exists() else None
    mail = report_email(report, files, chart, sender=sender, recipients=recipients)
    try:
        AwsOutbox(None, sender).send_email(list(recipients), mail.email, mail.attachments)
    except Exception as error:  # counted like any failed delivery: the summary says so, the run goes on
        sim.result.failed_deliveries += 1
        sim.result.delivery_errors.append(f"report email: {error}")
        return
    sent = get_backend("ses")["123456789012"]["us-east-1"].sent_messages
    sim.result.report_email_bytes = len(sent[-1].raw_data.encode()) if sent else mail.size
    sim.result.report_email_file = f"{out}/email/{len(sent):04d}.eml"
    sim.result.report_email_left_out = mail.left_out


def report_facts(result: DemoResult) -> list[tuple[str, ...]]:
    """The summary's row for the report the demo rendered."""
    rows: list[tuple[str, ...]] = [("report", f"{result.out}/report.html (report.json, slack.json, CSVs, chart.png)")]
    if result.report_email_file:
        inside = "without " + " and ".join(result.report_email_left_out) if result.report_email_left_out else ""
        what = inside or "chart inline, every table in tables.zip"
        size = f"{result.report_email_bytes / 1024:,.1f} KB"
        rows.append(("report email", f"{size}, {result.report_email_file} ({what})"))
    return rows


def account_figures(result: DemoResult) -> list[dict[str, Any]]:
    """Per (account, region): decisions to act (from the ledger, as the policy table counts them), the report's spend
    and idle figures (its ``gpu_hours_by_account`` table), what the demo launched there and read back there as
    stopped; then the hub's own row when its functions decided something (the notifier's delivery decisions)."""
    from governor.report.sections.accounts import origin_of, origins
    from governor_cli.demo.run import HUB_ACCOUNT, HUB_REGION

    table = (result.report.get("cost") or {}).get("by_account") or {}
    rows = {(str(r["account"]), str(r["region"])): r for r in table.get("rows", [])}
    known = origins(result.decisions)
    to_act: Counter[tuple[str, str]] = Counter(
        origin_of(d, known)
        for d in result.decisions
        if d.get("kind", "decision") == "decision" and d.get("verdict") == "act"
    )
    places = [(str(s["account"]), str(s["region"]), s) for s in result.sites]
    if to_act.get((HUB_ACCOUNT, HUB_REGION)):
        places.append((HUB_ACCOUNT, HUB_REGION, {"launched": [], "stopped": []}))
    figures = []
    for account, region, site in places:
        row = rows.get((account, region), {})
        figures.append(
            {
                "account": account,
                "region": region,
                "hub": account == HUB_ACCOUNT,
                "instances": len(site["launched"]),
                "stopped": len(site["stopped"]),
                "decisions_to_act": to_act.get((account, region), 0),
                "gpu_hours": float(row.get("gpu_hours", 0)),
                "cost_usd": float(row.get("cost_usd", 0)),
                "idle_gpu_hours": float(row.get("idle_gpu_hours", 0)),
                "would_reclaim_gpu_hours": float(row.get("would_reclaim_gpu_hours", 0)),
                "would_save_usd": float(row.get("would_save_usd", 0)),
                "reclaimed_gpu_hours": float(row.get("reclaimed_gpu_hours", 0)),
            }
        )
    return figures
