"""The ``report`` capability, declared: the daily and weekly security and cost report."""

from __future__ import annotations

from governor.capability import DELIVERY, Capability, Trigger, Uses
from governor.domain.actions import Notify, Record
from governor.report.policy import ReportsPolicy

CAPABILITY = Capability(
    name="report",
    demo="governor_cli.demo.capabilities.report",
    construct="infra.constructs.reports:Reports",
    construct_id="Reports",
    within="notifier",
    finding_policies=("reports", "budgets"),
    section="reports",
    section_model=ReportsPolicy,
    description="Daily and weekly security and cost report: Athena queries, ledger, chart, S3 archive",
    triggers=(
        Trigger("Daily", "schedule", "daily security and cost report", schedule="reports.daily_schedule"),
        Trigger("Weekly", "schedule", "weekly security and cost report", schedule="reports.weekly_schedule"),
    ),
    uses=(
        Uses("governor.report.archive"),
        Uses("governor.report.chart_image"),
        Uses("governor.adapters.instance_types"),
        Uses("governor.report.athena", ("IAM_ACTIONS", "DATA_ACTIONS")),
        Uses(
            "governor.adapters.cost_explorer",
            when=lambda policy: policy.pricing.effective_rates in ("cost_explorer", "cur"),
        ),
        Uses("governor.adapters.cur", when=lambda policy: policy.pricing.effective_rates == "cur"),
        *DELIVERY,
    ),
    actions=(Record, Notify),
    secrets=lambda policy: policy.notifications.slack_secret_names(),
    sections=("reports", "notifications", "pricing", "budgets"),
    reads=frozenset({"sessions"}),  # the session keeper's creator tag: who owns unowned spend
    modes=("DELIVERS to Slack and email, archives to S3", "report-only: archives to S3, sends nothing"),
)
