"""The report function on fakes: archive always, send only when enforcing, failed queries become findings."""

from __future__ import annotations

import datetime as dt
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from governor.adapters.ses import Attachment
from governor.domain.messages import Email, Message
from governor.notifier.handler import UndeliverableError
from governor.policy import parse_policy
from governor.report.handler import Adapters, handle
from governor.runtime import Runtime
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.unit.test_report import sample_ledger

RUN_AT = dt.datetime(2023, 7, 11, 7, 0, tzinfo=dt.UTC)


@dataclass
class Outcome:
    name: str
    rows: list[dict[str, Any]]
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None

    def as_result(self) -> dict[str, Any]:
        return {"count": len(self.rows), "rows": self.rows}

    def problem(self) -> str | None:
        return self.reason


@dataclass
class FakeAthena:
    rows: dict[str, list[dict[str, Any]]]
    failing: set[str] = field(default_factory=set)
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def library(self) -> dict[str, str]:
        return {name: f"SELECT ... -- {name}" for name in [*self.rows, *self.failing]}

    def run(self, name: str, sql: str, parameters: dict[str, Any]) -> Outcome:
        self.calls.append((name, parameters["start"], parameters["end"]))
        if name in self.failing:
            return Outcome(name, [], f"query {name} stopped at the workgroup's bytes-scanned limit")
        current = parameters["start"].startswith("2023-07-10")
        return Outcome(name, self.rows[name] if current else [])


@dataclass
class FakeChart:
    widgets: list[Mapping[str, Any]] = field(default_factory=list)

    def render(self, widget: Mapping[str, Any]) -> bytes:
        self.widgets.append(widget)
        return b"\x89PNG fake chart"


@dataclass
class FakeArchive:
    objects: dict[str, tuple[bytes, str]] = field(default_factory=dict)

    def put(self, key: str, body: bytes, content_type: str) -> str:
        self.objects[key] = (body, content_type)
        return f"s3://reports/{key}"

    def get(self, key: str) -> bytes | None:
        found = self.objects.get(key)
        return found[0] if found else None

    def presign(self, key: str, expires_in: int) -> tuple[str, dt.datetime]:
        return f"https://reports.s3.amazonaws.com/{key}?X-Amz-Expires={expires_in}", RUN_AT + dt.timedelta(
            seconds=expires_in
        )


@dataclass
class FakeOutbox:
    slack: list[tuple[str, list[Message]]] = field(default_factory=list)
    emails: list[tuple[list[str], Email, list[Attachment]]] = field(default_factory=list)
    missing_secret: bool = False

    def post_slack(self, secret_name: str, messages: Sequence[Message]) -> None:
        if self.missing_secret:
            raise UndeliverableError(f"Slack webhook secret '{secret_name}' not found in Secrets Manager")
        self.slack.append((secret_name, list(messages)))

    def send_email(self, recipients: Sequence[str], email: Email, attachments: Sequence[Attachment] = ()) -> None:
        self.emails.append((list(recipients), email, list(attachments)))


def scheduled(kind: str = "daily") -> dict[str, Any]:
    return events.scheduled(
        {"kind": kind},
        event_id=f"sched-{kind}",
        time=RUN_AT.isoformat(),
        resources=["arn:aws:scheduler:us-east-1:123456789012:schedule/default/report"],
    )


def setup(enforce: bool, failing: set[str] | None = None, missing_secret: bool = False) -> tuple[Runtime, Adapters]:
    policy = parse_policy(
        {
            "reports": {"enforce": enforce, "email_recipients": ["lead@example.com"]},
            "notifications": {"email_sender": "governor@example.com"},
        }
    )
    ledger = MemoryLedger()
    for n, item in enumerate(sample_ledger()):
        ledger.put_item(item["kind"], f"k{n}", item)
    rt = Runtime(policy=policy, ledger=ledger, sink=MemorySink(), dead_letters=MemoryDeadLetters(), region="us-east-1")
    rows = {"world_open_ingress": [{"eventtime": "2023-07-10T11:50:00Z", "groupid": "sg-1", "cidr": "0.0.0.0/0"}]}
    aws = Adapters(
        queries=FakeAthena(rows, failing or set()),
        chart=FakeChart(),
        archive=FakeArchive(),
        outbox=FakeOutbox(missing_secret=missing_secret),
    )
    return rt, aws


def test_report_only_archives_html_json_csvs_and_chart_without_sending() -> None:
    rt, aws = setup(enforce=False)
    result = handle(scheduled(), rt, aws, RUN_AT)
    assert result["status"] == "archived" and result["period"][0] == "2023-07-10T00:00:00+00:00"
    keys = set(aws.archive.objects)  # type: ignore[attr-defined]
    prefix = "reports/daily/2023-07-10/"
    assert {prefix + n for n in ("report.html", "report.json", "chart.png", "security_world_open_ingress.csv")} <= keys
    archived = json.loads(aws.archive.objects[prefix + "report.json"][0])  # type: ignore[attr-defined]
    assert archived["cost"]["savings_usd"] == pytest.approx(85.08)
    assert aws.outbox.slack == [] and aws.outbox.emails == []  # type: ignore[attr-defined]
    decision = rt.ledger.decisions[-1][1]  # type: ignore[attr-defined]
    assert decision.policy == "reports" and "archived, not sent" in decision.reasons[-1]


def test_enforced_report_goes_to_slack_with_a_dashboard_link_and_email_with_inline_chart() -> None:
    rt, aws = setup(enforce=True)
    result = handle(scheduled("weekly"), rt, aws, RUN_AT)
    assert result["sent"] == ["slack", "email"]
    ((secret, messages),) = aws.outbox.slack  # type: ignore[attr-defined]
    assert secret == "governor/slack-webhook" and messages[0]["blocks"][0]["type"] == "header"
    recipients, email, attachments = aws.outbox.emails[0]  # type: ignore[attr-defined]
    assert recipients == ["lead@example.com"] and "cid:fleet-utilisation-chart" in email.html
    assert attachments[0].inline_cid == "fleet-utilisation-chart"
    (tables,) = [a for a in attachments if a.filename == "tables.zip"]  # every CSV in one zip (issue 48)
    assert "gpu_hours_by_team.csv" in zipfile.ZipFile(io.BytesIO(tables.content)).namelist()
    assert attachments[0].content.startswith(b"\x89PNG\r\n")  # the fleet chart drawn from the report's own data
    assert aws.chart.widgets == []  # type: ignore[attr-defined]  # CloudWatch only when matplotlib is missing
    digest = json.dumps(messages)
    assert "https://reports.s3.amazonaws.com/reports/weekly/2023-07-04/report.html" in digest
    assert "The link expires 12 Jul 2023 07:00 UTC" in digest


def test_without_a_pre_signed_link_the_digest_links_the_report_in_the_s3_console() -> None:
    """Issue 48: the digest never points at "the reports bucket" or "findings.csv" without a link."""
    rt, aws = setup(enforce=True)

    def no_link(key: str, expires_in: int) -> tuple[str, dt.datetime]:
        raise RuntimeError("credentials expired")

    aws.archive.presign = no_link  # type: ignore[method-assign]
    handle(scheduled(), rt, aws, RUN_AT)
    ((_, messages),) = aws.outbox.slack  # type: ignore[attr-defined]
    digest = json.dumps(messages)
    assert "https://console.aws.amazon.com/s3/object/reports?prefix=reports/daily/2023-07-10/report.html" in digest
    assert "in the reports bucket" not in digest and "findings.csv" not in digest


def test_without_matplotlib_the_chart_comes_from_cloudwatch_in_the_same_colours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    rt, aws = setup(enforce=False)
    handle(scheduled(), rt, aws, RUN_AT)
    (widget,) = aws.chart.widgets  # type: ignore[attr-defined]
    assert widget["metrics"][0][0]["expression"].startswith("SEARCH(")
    assert widget["metrics"][0][0]["color"] == "#0072b2"  # charts.PALETTE["busy"]
    assert aws.archive.objects["reports/daily/2023-07-10/chart.png"][0] == b"\x89PNG fake chart"  # type: ignore[attr-defined]


def test_each_report_archives_its_summary_and_the_next_one_draws_the_trend() -> None:
    rt, aws = setup(enforce=False)
    earlier = scheduled()
    earlier["id"], earlier["time"] = "sched-earlier", (RUN_AT - dt.timedelta(days=1)).isoformat()
    handle(earlier, rt, aws, RUN_AT - dt.timedelta(days=1))
    summary = json.loads(aws.archive.objects["reports/daily/2023-07-09/summary.json"][0])  # type: ignore[attr-defined]
    assert summary["kind"] == "daily" and summary["start"].startswith("2023-07-09")
    handle(scheduled(), rt, aws, RUN_AT)
    archived = json.loads(aws.archive.objects["reports/daily/2023-07-10/report.json"][0])  # type: ignore[attr-defined]
    assert [t["start"][:10] for t in archived["trends"]] == ["2023-07-09"]
    page = aws.archive.objects["reports/daily/2023-07-10/report.html"][0].decode()  # type: ignore[attr-defined]
    assert "Trend over the last 2 daily reports" in page and "vs the period before" in page


def test_a_budget_threshold_is_alerted_once_per_team_and_month() -> None:
    rt, aws = setup(enforce=False)
    rt.policy.budgets.teams.update({"speech": 120.0, "vision": 10_000.0})
    handle(scheduled(), rt, aws, RUN_AT)
    alerts = [f for f in rt.sink.findings if f.rule == "budgets.threshold"]  # type: ignore[attr-defined]
    # speech spent $111.60 of $120 by 11 Jul (93%): the 80% threshold, not yet 100%; vision nowhere near.
    assert [(f.team, f.severity) for f in alerts] == [("speech", "warning")]
    assert "$111.60 of $120.00" in alerts[0].detail and "budgets.teams" in alerts[0].detail
    again = scheduled()
    again["id"] = "sched-again"
    handle(again, rt, aws, RUN_AT)
    assert len([f for f in rt.sink.findings if f.rule == "budgets.threshold"]) == 1  # type: ignore[attr-defined]
    weekly = handle(scheduled("weekly"), rt, aws, RUN_AT)
    assert weekly["budget_alerts"] == []  # only the daily report raises them


def test_the_previous_period_is_queried_for_the_change() -> None:
    rt, aws = setup(enforce=False)
    handle(scheduled(), rt, aws, RUN_AT)
    starts = {start for _, start, _ in aws.queries.calls}  # type: ignore[attr-defined]
    assert starts == {"2023-07-10T00:00:00+00:00", "2023-07-09T00:00:00+00:00"}


def test_a_failed_query_is_a_finding_and_a_note_not_a_crash() -> None:
    rt, aws = setup(enforce=False, failing={"unauthorized_api_calls"})
    result = handle(scheduled(), rt, aws, RUN_AT)
    assert result["query_errors"] == ["unauthorized_api_calls"]
    (finding,) = rt.sink.findings  # type: ignore[attr-defined]
    assert finding.rule == "reports.query-failed" and "bytes-scanned" in finding.detail
    html = aws.archive.objects["reports/daily/2023-07-10/report.html"][0].decode()  # type: ignore[attr-defined]
    assert "bytes-scanned limit" in html


def test_a_missing_webhook_secret_still_archives_and_parks_a_clear_message() -> None:
    rt, aws = setup(enforce=True, missing_secret=True)
    result = handle(scheduled(), rt, aws, RUN_AT)
    assert result["sent"] == ["email"] and result["archived"]
    ((_, reason),) = rt.dead_letters.messages  # type: ignore[attr-defined]
    assert "report archived to s3://reports/reports/daily/2023-07-10/report.html" in reason and "not found" in reason


def test_only_scheduler_events_are_accepted() -> None:
    rt, aws = setup(enforce=False)
    bad = scheduled()
    bad["source"] = "aws.events"
    assert handle(bad, rt, aws, RUN_AT)["status"] == "rejected"
    wrong_kind = scheduled("hourly")
    assert handle(wrong_kind, rt, aws, RUN_AT)["status"] == "rejected"
    assert aws.archive.objects == {}  # type: ignore[attr-defined]


def test_a_long_running_open_session_is_counted_once() -> None:
    rt, aws = setup(enforce=False)
    old = {
        "instance_id": "i-0e55",
        "instance_type": "g5.xlarge",
        "gpus": 1,
        "lifecycle": "on-demand",
        "team": "vision",
        "owner": "erin",
        "start": "2023-05-01T00:00:00+00:00",
        "end": None,
        "price_per_hour": 1.006,
        "session_key": "i-0e55#2023-05-01T00:00:00+00:00",
    }
    rt.ledger.put_item("session", old["session_key"], old)
    rt.ledger.put_item("open-session", "i-0e55", {**old, "open": True})
    rt.ledger.put_item("open-session", "i-0f66", {**old, "instance_id": "i-0f66", "session_key": "k2", "open": True})
    rt.ledger.put_item("open-session", "i-0a77", {**old, "instance_id": "i-0a77", "session_key": "k3", "open": False})
    handle(scheduled(), rt, aws, RUN_AT)
    archived = json.loads(aws.archive.objects["reports/daily/2023-07-10/report.json"][0])  # type: ignore[attr-defined]
    owners = {r["owner"]: r for r in archived["cost"]["by_owner"]["rows"]}
    assert owners["erin"]["sessions"] == 2 and owners["erin"]["gpu_hours"] == pytest.approx(48.0)


def test_each_team_with_its_own_channel_gets_its_own_digest_on_the_same_schedule() -> None:
    rt, aws = setup(enforce=True)
    rt = Runtime(
        policy=parse_policy(
            {
                "reports": {"enforce": True},
                "notifications": {"teams": {"vision": {"slack_secret_name": "vision/slack"}, "nlp": {"email": []}}},
            }
        ),
        ledger=rt.ledger,
        sink=rt.sink,
        dead_letters=rt.dead_letters,
        region="us-east-1",
    )
    result = handle(scheduled(), rt, aws, RUN_AT)
    assert result["sent"] == ["slack", "slack:vision"]  # nlp has no channel of its own: the fleet digest covers it
    (_, fleet), (secret, team) = aws.outbox.slack  # type: ignore[attr-defined]
    assert secret == "vision/slack"
    assert team[0]["blocks"][0]["text"]["text"].startswith("GPU daily report for team vision")
    assert "Audit activity" not in json.dumps(team) and "Audit activity" in json.dumps(fleet)


def test_a_retry_after_the_email_failed_sends_only_the_email_not_a_second_slack_digest() -> None:
    rt, aws = setup(enforce=True)
    outbox: FakeOutbox = aws.outbox  # type: ignore[assignment]
    sent_email = outbox.send_email

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("SES unavailable after its retries")

    outbox.send_email = refuse  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        handle(scheduled(), rt, aws, RUN_AT)  # Lambda retries the invocation
    outbox.send_email = sent_email  # type: ignore[method-assign]
    result = handle(scheduled(), rt, aws, RUN_AT)
    assert result["sent"] == ["slack", "email"]
    assert len(outbox.slack) == 1 and len(outbox.emails) == 1


def test_the_archive_keeps_the_runs_inputs_so_the_same_report_gives_the_same_money() -> None:
    """Issue 48 item 2: the scheduled report archives ``inputs.json`` beside ``report.json``: its period, the policy
    as parsed and what it priced with, which ``governor report --inputs`` reads to give the same figures."""
    rt, aws = setup(enforce=False)
    handle(scheduled(), rt, aws, RUN_AT)
    objects = aws.archive.objects  # type: ignore[attr-defined]
    prefix = "reports/daily/2023-07-10/"
    assert prefix + "inputs.json" in objects
    inputs = json.loads(objects[prefix + "inputs.json"][0])
    assert (inputs["kind"], inputs["start"], inputs["end"]) == ("daily", "2023-07-10T00:00:00Z", "2023-07-11T00:00:00Z")
    assert inputs["policy"]["pricing"] == json.loads(rt.policy.model_dump_json(by_alias=True))["pricing"]
