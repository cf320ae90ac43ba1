"""The ``report`` function: the daily and weekly security and cost report, on EventBridge Scheduler.

It runs the audit queries on Athena for the period and the one before, reads the ledger, renders the report with
the fleet chart, archives HTML, JSON, CSVs, chart and ``summary.json`` (the trend point later reports read back) to
the reports bucket, and, when ``reports.enforce`` is true, posts a Slack digest with a pre-signed link to the archived
HTML and emails the report. The archive comes first, so a failed delivery never loses a report. The daily report also
raises one finding per team, month and budget threshold crossed.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, Protocol

from pydantic import ConfigDict, Field

from governor.adapters.aws import per_session
from governor.adapters.delivery import DELIVERY_KIND, AwsOutbox, Outbox, UndeliverableError
from governor.adapters.instance_types import GpuTypes
from governor.domain.actions import Notify, Record
from governor.domain.decision import Decision, Finding
from governor.domain.gpus import instance_types
from governor.domain.model import Model
from governor.events.envelopes import EventBridgeEnvelope, InvalidEventError, parse_model
from governor.observability import logger, metrics
from governor.outbox import Outbox as FindingsOutbox
from governor.report.build import TREND_PERIODS, build_report, price_book, team_view, with_history
from governor.report.charts import utilisation_widget
from governor.report.domain import period_for, previous_period
from governor.report.email import report_email
from governor.report.inputs import FILE as INPUTS_FILE
from governor.report.inputs import recorded_inputs
from governor.report.ledger_read import Compactor, read_kind
from governor.report.model import Report, TrendPoint
from governor.report.render.csv_files import csv_files
from governor.report.render.html_page import render_html
from governor.report.render.slack import slack_messages
from governor.report.sections.budgets import budget_alerts
from governor.runtime import Handler, Invocation, Runtime

SCHEDULE_SOURCE = "aws.scheduler"
LEDGER_KINDS = ("decision", "session", "interruption", "governor-tag")
LEDGER_LOOKBACK = dt.timedelta(days=35)
#: Seconds kept after the queries for the ledger, the chart, rendering, the archive and delivery.
RESERVE_SECONDS = 90.0
#: A query is started only with at least this much of the budget left (Athena needs a few seconds to plan).
MIN_QUERY_SECONDS = 15.0


class Deadline:
    """The report's overall time budget: the invocation's remaining time less what rendering and delivery need.

    Twenty queries, each allowed minutes, do not fit one Lambda timeout; without a budget a slow run timed out,
    was retried and ended in the DLQ with no report. With it, the queries that do not fit are reported as not run.
    """

    def __init__(self, context: Any = None, reserve_seconds: float = RESERVE_SECONDS) -> None:
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        self._remaining_ms = remaining if callable(remaining) else None
        # A short invocation (the demo's, a test's) keeps a quarter of its time rather than the full reserve.
        total = float(remaining()) / 1000.0 if callable(remaining) else 0.0
        self.reserve_seconds = min(reserve_seconds, total / 4) if total else reserve_seconds

    def left(self) -> float | None:
        """Seconds left for queries; None when there is no deadline (local runs, tests without a context)."""
        if self._remaining_ms is None:
            return None
        return float(self._remaining_ms()) / 1000.0 - self.reserve_seconds


SUMMARY_FILE = "summary.json"
BUDGET_ALERT_KIND = "budget-alert"
# The Slack link to the archived HTML; the archive adapter states the real expiry (credentials may end sooner).
LINK_SECONDS = 24 * 3600


class ReportDetail(Model):
    model_config = ConfigDict(extra="ignore")

    kind: Literal["daily", "weekly"] = "daily"


class ScheduledReport(EventBridgeEnvelope):
    """The Scheduler's payload (shaped like a Scheduled Event) with ``detail.kind`` daily or weekly."""

    detail: ReportDetail = Field(default_factory=ReportDetail)


class QueryRunner(Protocol):
    """The Athena adapter (``report/athena.py``): the query library shipped with the code and a way to run one."""

    def library(self) -> dict[str, str]: ...

    def run(self, name: str, sql: str, parameters: dict[str, Any]) -> Any: ...


class ChartSource(Protocol):
    def render(self, widget: Mapping[str, Any]) -> bytes: ...


class Archive(Protocol):
    def put(self, key: str, body: bytes, content_type: str) -> str: ...

    def get(self, key: str) -> bytes | None: ...

    def presign(self, key: str, expires_in: int) -> tuple[str, dt.datetime]: ...


@dataclass
class Adapters:
    """What the report reads and writes; tests pass moto-backed or in-memory versions."""

    queries: QueryRunner
    chart: ChartSource | None
    archive: Archive
    outbox: Outbox
    #: Reads the GPU facts of the period's instance types (DescribeInstanceTypes, cached per container); None: the
    #: shipped GPU table answers (:mod:`governor.domain.gpus`).
    gpu_types: Callable[[Iterable[str]], str | None] | None = None


class ReportEnvironment(Model):
    model_config = ConfigDict(extra="ignore")

    bucket: str = Field(alias="REPORTS_BUCKET")
    # Absent in a regional stack: the audit lake lives in the audit region (docs/deploy.md), so no queries run here.
    workgroup: str | None = Field(None, alias="ATHENA_WORKGROUP")
    database: str | None = Field(None, alias="ATHENA_DATABASE")
    dashboard_url: str | None = Field(None, alias="DASHBOARD_URL")


class NoQueries:
    """The query runner of a stack without the audit lake: the report carries the ledger and the chart only."""

    def library(self) -> dict[str, str]:
        return {}

    def run(self, name: str, sql: str, parameters: dict[str, Any]) -> Any:
        raise AssertionError(f"no audit lake in this region: {name} cannot run")


@cache
def _environment() -> ReportEnvironment:
    return ReportEnvironment.model_validate(dict(os.environ))


@per_session
def _aws(region: str | None, sender: str | None) -> Adapters:
    from governor.report.archive import S3Archive
    from governor.report.athena import AthenaQueries
    from governor.report.chart_image import CloudWatchChart

    env = _environment()
    return Adapters(
        queries=AthenaQueries(env.workgroup, env.database, region=region)
        if env.workgroup and env.database
        else NoQueries(),
        chart=CloudWatchChart(region),
        archive=S3Archive(env.bucket, region),
        outbox=AwsOutbox(region, sender),
        gpu_types=GpuTypes(region),
    )


def parse(raw: Any) -> ScheduledReport:
    """Only the Scheduler's invocations; anything else is rejected to the DLQ with its reason."""
    event = parse_model(ScheduledReport, raw)
    if event.source != SCHEDULE_SOURCE or event.detail_type != "Scheduled Event":
        raise InvalidEventError(
            f"unsupported event {event.source}/{event.detail_type!r}: the report function runs on its schedule",
            event.id,
        )
    return event


def run_queries(
    queries: QueryRunner, start: dt.datetime, end: dt.datetime, deadline: Deadline | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Every query of the library shipped with the code, for [start, end): results in the local engine's shape, and
    each failure's reason (a refused query's too: a shipped file that does not parse).

    Within ``deadline``: no query starts without ``MIN_QUERY_SECONDS`` left, and none may wait past the budget.
    """
    results: dict[str, dict[str, Any]] = {}
    parameters = {"start": start.isoformat(), "end": end.isoformat()}
    own_timeout = getattr(queries, "timeout_seconds", None)
    library = queries.library()
    # Shipped query files that do not parse: named in the report, never run.
    errors: dict[str, str] = dict(getattr(queries, "refused", {}))
    try:
        for name, sql in sorted(library.items()):
            left = deadline.left() if deadline is not None else None
            if left is not None and left < MIN_QUERY_SECONDS:
                errors[name] = (
                    f"query {name} not run: the report's time budget was spent (the function's timeout less "
                    f"{RESERVE_SECONDS:.0f} s for rendering and delivery)"
                )
                continue
            if left is not None and isinstance(own_timeout, int | float):
                queries.timeout_seconds = min(float(own_timeout), left)  # type: ignore[attr-defined]
            outcome = queries.run(name, sql, parameters)
            if outcome.ok:
                results[name] = outcome.as_result()
            else:
                errors[name] = outcome.problem() or f"query {name} failed"
    finally:
        if isinstance(own_timeout, int | float):
            queries.timeout_seconds = own_timeout  # type: ignore[attr-defined]
    return results, errors


def ledger_items(runtime: Runtime, start: dt.datetime) -> list[dict[str, Any]]:
    """Decisions since ``start`` (the previous period's); sessions and Spot records from further back.

    Idle sweeps write a decision per instance every few minutes, so decisions are read for the two periods only,
    each compacted as its page arrives (:mod:`governor.report.ledger_read`); sessions still open (however old) come
    from the lifecycle's ``open-session`` items.
    """
    compactor = Compactor()
    items: list[dict[str, Any]] = list(read_kind(runtime.ledger, "decision", start, compactor))
    for kind in LEDGER_KINDS:
        if kind != "decision":
            items.extend(read_kind(runtime.ledger, kind, start - LEDGER_LOOKBACK, compactor))
    known = {item.get("session_key") for item in items if item.get("kind") == "session"}
    for open_session in runtime.ledger.query_kind("open-session"):
        if open_session.get("open") and open_session.get("session_key") not in known:
            items.append({**open_session, "kind": "session"})
    return items


def _prefix(report: Report) -> str:
    return prefix_for(report.kind, report.start)


def console_url(uri: str) -> str:
    """The S3 console's page of an archived object (``s3://bucket/key``): the link when no pre-signed one could be
    made. It never expires but asks the reader to sign in to the account, so the pre-signed link (24 h, stated in
    the message) is preferred: a reader opens it from Slack or the email without console access."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return f"https://console.aws.amazon.com/s3/object/{bucket}?prefix={key}"


def prefix_for(kind: str, start: dt.datetime) -> str:
    return f"reports/{kind}/{start:%Y-%m-%d}/"


def history(store: Archive, kind: str, start: dt.datetime, end: dt.datetime, periods: int) -> list[TrendPoint]:
    """The ``summary.json`` of up to ``periods`` earlier reports of this kind (missing ones are simply absent)."""
    step = end - start
    points = []
    for back in range(1, periods + 1):
        body = store.get(prefix_for(kind, start - step * back) + SUMMARY_FILE)
        if body is None:
            continue
        try:
            points.append(TrendPoint.model_validate_json(body))
        except ValueError:
            logger.warning("unreadable report summary skipped", extra={"kind": kind, "periods_back": back})
    return points


def archive(
    report: Report,
    files: Mapping[str, str],
    chart: bytes | None,
    html: str,
    store: Archive,
    inputs: str | None = None,
) -> list[str]:
    """HTML, JSON, the trend summary, the chart, every CSV and the run's inputs (``inputs.json``: what it priced
    with, so ``governor report --inputs`` over the same ledger gives the same money) under one dated prefix."""
    prefix = _prefix(report)
    written = [
        store.put(prefix + "report.html", html.encode(), "text/html; charset=utf-8"),
        store.put(prefix + "report.json", report.model_dump_json(indent=2).encode(), "application/json"),
        store.put(prefix + SUMMARY_FILE, report.trend_point().model_dump_json().encode(), "application/json"),
    ]
    if chart is not None:
        written.append(store.put(prefix + report.chart_file, chart, "image/png"))
    if inputs is not None:
        written.append(store.put(prefix + INPUTS_FILE, inputs.encode(), "application/json"))
    written += [store.put(prefix + name, body.encode(), "text/csv; charset=utf-8") for name, body in files.items()]
    return written


def deliver(
    report: Report,
    files: Mapping[str, str],
    chart: bytes | None,
    runtime: Runtime,
    outbox: Outbox,
    event_id: str | None = None,
) -> tuple[list[str], list[str]]:
    """Slack (summary with a dashboard link) and email (chart inline, every table attached).

    Returns the channels used and the ones that cannot be used at all (missing secret, no sender); a delivery that
    fails after its retries raises so the invocation is retried and finally parked in the DLQ. With ``event_id``, each
    channel that took the report is marked in the ledger, so the retry sends only to the channels still missing it.
    """
    policy = runtime.policy
    sent: list[str] = []
    problems: list[str] = []

    def once(channel: str, send: Callable[[], None]) -> None:
        marker = f"{event_id}#report:{channel}"
        if event_id and runtime.ledger.get_item(DELIVERY_KIND, marker):
            sent.append(channel)
            return
        send()
        if event_id:
            runtime.ledger.put_item(DELIVERY_KIND, marker, {"event_id": event_id, "channel": channel})
        sent.append(channel)

    try:
        once("slack", lambda: outbox.post_slack(policy.notifications.slack_secret_name, slack_messages(report)))
    except UndeliverableError as error:
        problems.append(str(error))
    # One digest per team with its own channel (notifications.teams), narrowed to that team, same schedule.
    for team, route in sorted(policy.notifications.teams.items()):
        if not route.slack_secret_name or route.slack_secret_name == policy.notifications.slack_secret_name:
            continue

        def post_team(secret: str = route.slack_secret_name, name: str = team) -> None:
            outbox.post_slack(secret, slack_messages(team_view(report, name)))

        try:
            once(f"slack:{team}", post_team)
        except UndeliverableError as error:
            problems.append(f"team {team}: {error}")
    recipients = policy.reports.email_recipients or policy.notifications.email_recipients
    if recipients:
        mail = report_email(
            report, files, chart, sender=policy.notifications.email_sender or "", recipients=tuple(recipients)
        )
        logger.info("report email", extra={"bytes": mail.size, "left_out": list(mail.left_out)})
        try:
            once("email", lambda: outbox.send_email(recipients, mail.email, mail.attachments))
        except UndeliverableError as error:
            problems.append(str(error))
    for problem in problems:
        logger.error("report channel unusable", extra={"reason": problem})
    return sent, problems


def produce(
    parsed: ScheduledReport,
    raw: Any,
    runtime: Runtime,
    aws: Adapters,
    now: dt.datetime,
    dashboard_url: str | None = None,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """Query, read, render, record, archive, then (when enforcing) deliver: a failed delivery never loses a report.

    The current period's queries come first; the previous period's (for the trend) only with budget left.
    """
    kind = parsed.detail.kind
    start, end = period_for(kind, parsed.time or now)
    before_start, before_end = previous_period(start, end)
    current, errors = run_queries(aws.queries, start, end, deadline)
    previous, _ = run_queries(aws.queries, before_start, before_end, deadline)
    refused = set(getattr(aws.queries, "refused", {}))
    items = ledger_items(runtime, before_start)
    policy = runtime.policy
    notes = [f"Athena: {reason}" for reason in errors.values()]
    unread = aws.gpu_types(instance_types(items)) if aws.gpu_types is not None else None
    if unread:
        notes.append(unread)
    book = price_book(policy, runtime.region, until=end, queries=aws.queries)
    report = build_report(
        kind=kind,
        start=start,
        end=end,
        policy=policy,
        prices=book,
        audit=current,
        previous_audit=previous,
        ledger_items=items,
        errors=errors,
        notes=notes,
        now=now,
    )
    report.dashboard_url = policy.notifications.dashboard_url or dashboard_url
    with_history(report, history(aws.archive, kind, start, end, TREND_PERIODS))
    chart = chart_png(report, aws.chart, runtime.region or "us-east-1", policy.reports.rightsizing_max_utilization)
    files = csv_files(report, current)
    enforce = policy.reports.enforce
    decision = Decision(
        policy="reports",
        verdict="act",
        resource=f"report:{kind}:{start:%Y-%m-%d}",
        actions=[
            Record(enforced=True, target="reports bucket"),
            Notify(enforced=enforce, channels=["slack", "email"]),
        ],
        reasons=[f"{kind} report for {start.isoformat()} to {end.isoformat()}"]
        + ([] if enforce else ["reports.enforce is false: archived, not sent"]),
        evidence={
            "security_rows": {q.name: q.count for q in report.security},
            "gpu_hours": report.cost.gpu_hours_total,
            "savings_usd": report.cost.savings_usd,
            "query_errors": errors,
        },
        rule="reports.scheduled",
    )
    runtime.ledger.record(decision, event_id=parsed.id)
    if errors:
        publish_findings(
            runtime,
            parsed.id,
            [
                Finding(
                    policy="reports",
                    rule="reports.query-failed",
                    severity="warning",
                    resource=f"athena:{name}",
                    title=f"Audit query {name} {'was refused' if name in refused else 'failed'} for the {kind} report",
                    detail=reason,
                    event_id=parsed.id,
                )
                for name, reason in errors.items()
            ],
        )
    alerts = raise_budget_alerts(report, runtime, parsed.id) if kind == "daily" else []
    html = render_html(report)
    inputs = recorded_inputs(book, kind, start, end, policy.model_dump(mode="json", by_alias=True))
    written = archive(report, files, chart, html, aws.archive, inputs.model_dump_json(indent=2))
    sent: list[str] = []
    problems: list[str] = []
    if enforce:
        try:
            report.report_url, report.report_url_expires = aws.archive.presign(
                _prefix(report) + "report.html", LINK_SECONDS
            )
        except Exception as error:  # a missing link degrades the message, it never stops delivery
            logger.warning("no pre-signed report link", extra={"error": error.__class__.__name__})
            report.report_url = console_url(next((w for w in written if w.endswith("/report.html")), written[0]))
        sent, problems = deliver(report, files, chart, runtime, aws.outbox, parsed.id)
    if problems:
        runtime.dead_letters.send(raw, f"report archived to {written[0]} but " + "; ".join(problems))
    metrics.add_metric(name="ReportsArchived", unit="Count", value=1)
    logger.info("report done", extra={"kind": kind, "objects": len(written), "sent": sent, "enforce": enforce})
    return {
        "status": "sent" if sent else "archived",
        "kind": kind,
        "period": [start.isoformat(), end.isoformat()],
        "archived": written,
        "sent": sent,
        "empty": report.empty,
        "query_errors": sorted(errors),
        "undeliverable": problems,
        "budget_alerts": alerts,
    }


def chart_png(report: Report, fallback: ChartSource | None, region: str, threshold: float) -> bytes | None:
    """The fleet chart drawn with matplotlib from the report's data; CloudWatch's widget image if that is missing.

    The chart is decoration: a failure is a note in the report, never a failed report.
    """
    try:
        from governor.report.chart_image import render_fleet_png

        return render_fleet_png(
            report.charts, title="Fleet GPU-hours: busy, idle and unmonitored", period=(report.start, report.end)
        )
    except ImportError:
        if fallback is None:
            report.notes.append("chart unavailable (matplotlib is not in the layer and no CloudWatch fallback)")
            return None
    except Exception as error:
        report.notes.append(f"chart unavailable ({error.__class__.__name__})")
        return None
    from governor.report.chart_image import widget_colours

    try:
        return fallback.render(widget_colours(utilisation_widget(region, report.start, report.end, threshold)))
    except Exception as error:
        report.notes.append(f"chart unavailable ({error.__class__.__name__})")
        return None


def publish_findings(runtime: Runtime, event_id: str, findings: list[Finding]) -> None:
    """Through the findings outbox, as every function publishes: staged under their ids, then sent (subscribers such
    as the Security Hub export take only findings the outbox holds, ``governor.securityhub.provenance``)."""
    box = FindingsOutbox(runtime.ledger, runtime.sink, event_id=event_id)
    box.add(findings)
    box.flush()


def raise_budget_alerts(report: Report, runtime: Runtime, event_id: str) -> list[str]:
    """One finding per team (or account), month and threshold crossed: the ledger remembers which were raised already.

    Only the daily report raises them (the weekly one runs at the same hour and would race it); the notifier then
    routes them to the team like any finding (critical at 100 % and over, else warning).
    """
    raised: list[str] = []
    findings: list[Finding] = []
    for row, threshold in budget_alerts(report.budgets, runtime.policy.budgets.alert_thresholds):
        account = row.scope == "account"
        name = f"account:{row.team}" if account else row.team  # an account id is never mistaken for a team's name
        key = f"{name}#{report.end - dt.timedelta(microseconds=1):%Y-%m}#{threshold}"
        if runtime.ledger.get_item(BUDGET_ALERT_KIND, key) is not None:
            continue
        findings.append(
            Finding(
                policy="budgets",
                rule="budgets.threshold",
                severity="critical" if threshold >= 100 else "warning",
                resource=f"budget:{name}",
                team=None if account else row.team,
                account=row.team if account else None,
                title=f"{'Account' if account else 'Team'} {row.team} has spent {row.spent_percent:.0f}% of its "
                "monthly GPU budget",
                detail=(
                    f"${row.spent_usd:,.2f} of ${row.budget_usd:,.2f} by {report.end:%d %b}; at "
                    f"${row.burn_per_day_usd:,.2f} a day the month ends near ${row.forecast_usd:,.2f}. Stop idle "
                    + (
                        "instances in the account, or raise budgets.accounts in governor.yaml."
                        if account
                        else "instances of the team, or raise budgets.teams in governor.yaml."
                    )
                ),
                event_id=event_id,
            )
        )
        raised.append(key)
    if findings:
        publish_findings(runtime, event_id, findings)  # first: a failure retries the invocation, nothing marked sent
    for key, finding in zip(raised, findings, strict=True):
        runtime.ledger.put_item(
            BUDGET_ALERT_KIND, key, {"team": finding.team or f"account:{finding.account}", "title": finding.title}
        )
    return raised


def process(parsed: ScheduledReport, runtime: Runtime, aws: Adapters, call: Invocation) -> dict[str, Any]:
    """One report per scheduled invocation id (Powertools Idempotency when the stack provides the table)."""
    dashboard = os.environ.get("DASHBOARD_URL")
    return produce(parsed, call.event, runtime, aws, call.now, dashboard, Deadline(call.context))


def adapters_for(event: Any, runtime: Runtime) -> Adapters:
    return _aws(runtime.region, runtime.policy.notifications.email_sender)


def handle(
    event: Any,
    runtime: Runtime,
    aws: Adapters | None = None,
    now: dt.datetime | None = None,
    context: Any = None,
) -> dict[str, Any]:
    """Parse at the edge, then build, archive and (when enforcing) send the report."""
    return HANDLER.handle(event, runtime, aws, context=context, now=now)


#: EventBridge Scheduler invokes this daily and weekly (``reports.*_schedule``).
HANDLER: Handler[ScheduledReport, Adapters] = Handler(
    __name__, parse=lambda raw, _: parse(raw), process=process, adapters=adapters_for
)
lambda_handler = HANDLER.lambda_handler()
