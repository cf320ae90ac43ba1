"""The report as a short Slack digest (Block Kit) and as the email's plain-text alternative."""

from __future__ import annotations

from typing import Any

from governor.domain.escape import slack_text
from governor.domain.messages import (
    MAX_BLOCKS,
    MAX_FALLBACK_CHARS,
    MAX_HEADER_CHARS,
    Message,
    split_text,
)
from governor.report.model import Report, Table
from governor.report.render.csv_files import TABLES_ZIP
from governor.report.render.format import (
    delta,
    energy_text,
    governor_cost_text,
    money,
    title,
    todo_items,
    would_reclaim_text,
)
from governor.report.words import coverage_text, plural, sentence


def _link_line(report: Report) -> str:
    if not report.report_url:
        return "The full report (HTML and every table as CSV) is in the reports bucket."
    expiry = f" The link expires {report.report_url_expires:%d %b %Y %H:%M} UTC." if report.report_url_expires else ""
    if report.report_url.startswith(S3_CONSOLE):
        expiry = " (the S3 console: sign in to the account to open it)"
    return f"<{report.report_url}|Open the full report> (charts, every finding, every table).{expiry}"


#: The S3 console's object pages: the report's link when no pre-signed one could be made (report handler).
S3_CONSOLE = "https://console.aws.amazon.com/s3/"


def slack_messages(report: Report, teams: int = 5) -> list[Message]:
    """The report as one short Block Kit digest: today's to-do, money by team, budgets, and a link to the full report.

    Built with ``slack_sdk``'s Block Kit models, so a block Slack would reject fails here, not in the channel.
    """
    from slack_sdk.models.blocks import ContextBlock, DividerBlock, HeaderBlock, MarkdownTextObject, SectionBlock

    blocks: list[Any] = [HeaderBlock(text=title(report)[:MAX_HEADER_CHARS])]
    blocks += [SectionBlock(text=MarkdownTextObject(text=chunk)) for chunk in split_text(_todo_text(report)) if chunk]
    blocks.append(DividerBlock())
    money_text = "\n".join(_money_lines(report, teams))
    blocks += [SectionBlock(text=MarkdownTextObject(text=chunk)) for chunk in split_text(money_text) if chunk]
    audit = _audit_line(report)
    if audit:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=slack_text(audit))]))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_link_line(report))]))
    cost = report.cost
    fallback = f"{title(report)}: {plural(len(report.open_findings), 'open finding')}, {money(cost.cost_total_usd)}"
    return [{"text": fallback[:MAX_FALLBACK_CHARS], "blocks": [block.to_dict() for block in blocks[:MAX_BLOCKS]]}]


def _todo_text(report: Report) -> str:
    todo = todo_items(report, rest="in the full report (link below)" if report.report_url else "in the full report")
    if not todo:
        return "*Nothing needs doing today:* no open warning or critical findings."
    lines = "\n".join(f"{i}. {slack_text(t)}" for i, t in enumerate(todo, start=1))
    return f"*What to do today*\n{lines}"


def _money_lines(report: Report, teams: int) -> list[str]:
    """Spend, idle and reclaimed; the change since the period before; the top teams, accounts and every budget."""
    cost = report.cost
    reclaim = (
        f"{money(cost.savings_usd)} reclaimed"
        if cost.idle_enforced or cost.savings_usd
        else f"report-only: {would_reclaim_text(cost)} with idle.enforce on"
    )
    lines = [
        f"*Money* {money(cost.cost_total_usd)} on {cost.gpu_hours_total:,.1f} GPU-hours; "
        f"{money(cost.idle_cost_usd)} of it idle; {reclaim}."
    ]
    lines.append(sentence(energy_text(cost)) + ".")
    priced = governor_cost_text(cost)
    if priced:
        lines.append(priced)
    covered = coverage_text(cost.savings_plans_coverage_pct, cost.reserved_coverage_pct, cost.coverage_source)
    if covered:
        lines.append(sentence(covered) + ".")
    previous = report.previous
    if previous is not None:
        lines.append(
            f"Spend {delta(cost.cost_total_usd, previous.spend_usd)}; idle spend "
            f"{delta(cost.idle_cost_usd, previous.idle_usd)}; reclaimed "
            f"{delta(cost.savings_usd, previous.reclaimed_usd)}."
        )
    for row in cost.by_team.rows[:teams]:
        idle = f" (idle {money(float(row.get('idle_usd', 0.0)))})" if row.get("idle_usd") else ""
        lines.append(
            f"• {slack_text(str(row['team']))}: {money(float(row['cost_usd']))}, "
            f"{float(row['gpu_hours']):,.1f} GPU-hours{idle}"
        )
    if len(cost.by_team.rows) > teams:
        lines.append(f"…and {plural(len(cost.by_team.rows) - teams, 'more team')} in the full report.")
    lines += _account_lines(cost.by_account, teams)
    for budget in report.budgets:
        lines.append(
            f"• budget {slack_text(budget.label)}: {money(budget.spent_usd)} of {money(budget.budget_usd)} "
            f"({budget.spent_percent:.0f}%), forecast {money(budget.forecast_usd)} by month end"
        )
    return lines


def _account_lines(by_account: Table | None, limit: int) -> list[str]:
    if by_account is None:
        return []
    lines = [
        f"• account {slack_text(str(row['account']))} {slack_text(str(row['region']))}: "
        f"{money(float(row['cost_usd']))}, {float(row['gpu_hours']):,.1f} GPU-hours"
        for row in by_account.rows[:limit]
    ]
    if len(by_account.rows) > limit:
        more = len(by_account.rows) - limit
        lines.append(f"…and {plural(more, 'more account and region', 'more accounts and regions')}.")
    return lines


def _audit_line(report: Report) -> str:
    """How many API calls the audit queries matched, busiest first; empty when none did."""
    audit_total = sum(q.count for q in report.security)
    if not audit_total:
        return ""
    busiest = [q for q in report.security if q.count][:3]
    named = ", ".join(f"{q.name.replace('_', ' ')} {q.count:,}" for q in busiest)
    return f"Audit activity (not findings): {plural(audit_total, 'matching API call')}; {named}."


def render_text(report: Report) -> str:
    """The plain-text alternative of the email (and the command's summary), in the HTML's order."""
    cost = report.cost
    lines = [title(report), ""]
    todo = todo_items(report)
    lines += (
        ["What to do today:"] + [f"  {i}. {t}" for i, t in enumerate(todo, start=1)]
        if todo
        else ["Nothing needs doing today: no open warning or critical findings."]
    )
    lines += ["", *report.notes] if report.notes else []
    lines += [
        "",
        "Money",
        f"  GPU spend {money(cost.cost_total_usd)} on {cost.gpu_hours_total:,.1f} GPU-hours",
        f"  idle {money(cost.idle_cost_usd)} ({cost.idle_gpu_hours_detected:,.1f} GPU-hours); "
        + (
            f"reclaimed {cost.idle_gpu_hours_reclaimed:,.1f} GPU-hours, {money(cost.savings_usd)}"
            if cost.idle_enforced or cost.savings_usd
            else f"would reclaim {cost.would_reclaim_gpu_hours:,.1f} GPU-hours, {money(cost.would_save_usd)}"
        ),
        f"  {energy_text(cost)}",
    ]
    priced = governor_cost_text(cost)
    if priced:
        lines.append(f"  {priced}")
    if cost.paid_unused.rows:
        lines.append(
            f"  paid for, unused (Capacity Blocks, reservations): {cost.paid_unused_gpu_hours:,.1f} GPU-hours, "
            f"{money(cost.paid_unused_usd)}"
        )
    covered = coverage_text(cost.savings_plans_coverage_pct, cost.reserved_coverage_pct, cost.coverage_source)
    if covered:
        lines.append(f"  {covered}")
    for row in cost.by_team.rows[:10]:
        lines.append(f"  {row['team']}: {money(float(row['cost_usd']))}, {float(row['gpu_hours']):,.1f} GPU-hours")
    for row in (cost.by_account.rows if cost.by_account is not None else [])[:20]:
        lines.append(
            f"  account {row['account']} {row['region']}: {money(float(row['cost_usd']))}, "
            f"{float(row['gpu_hours']):,.1f} GPU-hours"
        )
    for budget in report.budgets:
        lines.append(
            f"  budget {budget.label}: {money(budget.spent_usd)} of {money(budget.budget_usd)}, "
            f"forecast {money(budget.forecast_usd)}"
        )
    lines += [
        f"  Spot: {plural(cost.spot.interruptions, 'interruption')}, checkpoints delivered "
        f"{cost.spot.checkpoints_delivered}/{cost.spot.checkpoints_requested}",
        f"  rightsizing: {plural(len(cost.rightsizing.rows), 'candidate')}",
        "",
        "Audit activity (CIS monitoring queries; not findings)",
    ]
    for query in report.security:
        if query.count or query.error:
            change = f" ({query.change_text()})" if query.change is not None else ""
            lines.append(f"  {query.name}: {plural(query.count, 'event')}{change}")
    lines += ["", f"Every table is attached as CSV in {TABLES_ZIP} (archived with the full report when too large)."]
    if report.report_url:
        lines.append(f"Full report: {report.report_url}")
    return "\n".join(lines) + "\n"
