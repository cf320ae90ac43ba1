"""The report as one email that fits a mailbox: the page, the chart and the tables, within ``MAX_EMAIL_BYTES``.

A report emailed with each table as its own CSV attachment grew with the fleet (134 KB for the demo's day) and is
what mail gateways and phones choke on. Here the tables travel as one ``tables.zip`` (deflated CSV is a fraction of
its size); when the whole message still exceeds the budget, the page's heatmap and audit rows, the zip and then the
inline chart are left out, in that order, and the page says where the tables are instead: the report's archive in
the reports bucket, linked when the report has its link. The size is measured on the MIME bytes SES is given, so
the budget is what a mailbox gets.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass

from governor.adapters.ses import Attachment, build_mime
from governor.domain.escape import html_text
from governor.domain.messages import Email
from governor.report.model import Report
from governor.report.render.csv_files import TABLES_ZIP
from governor.report.render.format import title
from governor.report.render.html_page import render_html
from governor.report.render.slack import render_text

#: The report email's ceiling: the raw MIME message, attachments and encoding included (issue 48).
MAX_EMAIL_BYTES = 60 * 1024
CHART_CID = "fleet-utilisation-chart"


@dataclass(frozen=True)
class ReportEmail:
    """What is sent: the message, its attachments (the inline chart, the zip) and the size measured on the wire."""

    email: Email
    attachments: tuple[Attachment, ...]
    size: int
    #: What was left out to fit, in words ("the tables", "the chart"), for the log.
    left_out: tuple[str, ...] = ()


def zipped(files: Mapping[str, str]) -> bytes:
    """Every CSV in one deflated zip, in name order (the same tables give the same archive listing)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            archive.writestr(name, files[name])
    return buffer.getvalue()


def _where_tables(report: Report, attached: bool) -> str:
    if attached:
        return f"Every table is in the attached {TABLES_ZIP}, one CSV each."
    if report.report_url:
        return (
            f"Every table as CSV is archived with <a href='{html_text(report.report_url)}'>the full report</a> "
            "in the reports bucket."
        )
    return "Every table as CSV is archived with the full report in the reports bucket."


def report_email(
    report: Report,
    files: Mapping[str, str],
    chart: bytes | None,
    *,
    sender: str = "governor@example.com",
    recipients: tuple[str, ...] = ("reader@example.com",),
    budget: int = MAX_EMAIL_BYTES,
) -> ReportEmail:
    """The richest message within ``budget`` bytes: page + chart + tables; else the compact page (no heatmap, no
    audit rows) with them; else without the tables; else the compact page alone."""
    tables = Attachment(TABLES_ZIP, zipped(files), "application/zip") if files else None
    image = Attachment(report.chart_file, chart, "image/png", inline_cid=CHART_CID) if chart is not None else None
    heatmap = "the heatmap and the audit rows"
    tries = [
        ((image, tables, False), ()),
        ((image, tables, True), (heatmap,)),
        ((image, None, True), (heatmap, "the tables")),
        ((None, None, True), (heatmap, "the tables", "the chart")),
    ]
    built: ReportEmail | None = None
    for (with_image, with_tables, compact), left_out in tries:
        html = render_html(
            report,
            chart_src=f"cid:{CHART_CID}" if with_image is not None else None,
            inline_svg=False,
            tables_note=_where_tables(report, with_tables is not None),
            compact=compact,
        )
        email = Email(subject=title(report), html=html, text=render_text(report))
        attachments = tuple(a for a in (with_image, with_tables) if a is not None)
        raw = build_mime(
            sender=sender,
            recipients=recipients,
            subject=email.subject,
            html=email.html,
            text=email.text,
            attachments=attachments,
        )
        built = ReportEmail(email, attachments, len(raw), tuple(x for x in left_out if _had(x, tables, image)))
        if built.size <= budget:
            return built
    assert built is not None
    return built  # the page alone is over budget: sent anyway (its tables are bounded), and the log says its size


def _had(what: str, tables: Attachment | None, image: Attachment | None) -> bool:
    if what == "the tables":
        return tables is not None
    return image is not None if what == "the chart" else True
