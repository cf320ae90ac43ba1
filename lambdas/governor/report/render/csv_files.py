"""Every table of the report as CSV with a header row, made safe to open in a spreadsheet (``csv_cell``)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from governor.domain.escape import csv_cell
from governor.report.model import FINDING_COLUMNS, Report, columns_of
from governor.report.render.format import plain_value

#: The email's one attachment holding every table (``governor.report.email``).
TABLES_ZIP = "tables.zip"


def csv_files(report: Report, audit: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, str]:
    """Every table as CSV with a header row, even when empty: findings, budgets, cost tables, each audit query."""
    files: dict[str, str] = {"findings.csv": _csv(FINDING_COLUMNS, report.findings_table().rows)}
    if report.budgets:
        table = report.budgets_table()
        files["budgets.csv"] = _csv(table.columns, table.rows)
    for table in report.tables():
        files[f"{table.name}.csv"] = _csv(table.columns, table.rows)
    for summary in report.security:
        result = (audit or {}).get(summary.name, {})
        rows = list(result.get("rows", summary.top_rows))
        columns = list(result.get("columns") or []) or columns_of(rows) or summary.columns or ["no_rows_in_period"]
        files[f"security_{summary.name}.csv"] = _csv(columns, rows)
    return files


def resources_csv(report: Report) -> str:
    """``resources.csv``: every resource's record for the run (owner and how it is known, price and its basis, $/day,
    the action path that would run). Written beside the report by ``governor report``; never attached to an email (a
    1,000-instance fleet's records would outweigh the message)."""
    return _csv(report.resources.columns, report.resources.rows)


def _csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_cell(plain_value(v)) for k, v in row.items()})
    return buffer.getvalue()
