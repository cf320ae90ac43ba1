"""The report as one self-contained HTML page (inline CSS and SVG), in the order a reader acts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from governor.domain.escape import html_text
from governor.domain.facts import per_day_text
from governor.report import charts as charting
from governor.report.model import CostSection, FindingRow, Report, SpotStats, TrendPoint
from governor.report.render.format import (
    ID_CHARS,
    ID_COLUMNS,
    TEXT_CHARS,
    age_text,
    delta,
    energy_coverage,
    energy_text,
    format_value,
    governor_cost_text,
    human_header,
    money,
    numeric_column,
    title,
    todo_items,
)
from governor.report.words import coverage_text, plural, sentence

#: What the governor gave back (reclaimed dollars) in the trend chart: green, a colour nothing else in the report uses.
RECLAIMED_COLOUR = "#009e73"
# Rows of open (and of resolved) findings shown in the HTML; findings.csv has them all.
FINDING_ROWS = 25
#: ... and in the email, which must stay small (under 60 KB: Gmail clips long messages); the CSV has every one.
EMAIL_FINDING_ROWS = 10

_CSS = (
    charting.heat_css()
    + """
*{box-sizing:border-box}
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;padding:20px;max-width:1200px;
color:#111827;background:#fff;font-size:14px;line-height:1.45;overflow-wrap:break-word}
h1{font-size:21px;margin:0}h2{font-size:17px;margin:26px 0 8px;padding-bottom:3px;border-bottom:2px solid #e5e7eb}
h3{font-size:14px;margin:16px 0 6px}.muted{color:#6b7280}p{margin:6px 0}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:10px;margin:12px 0}
.tile{border:1px solid #e5e7eb;border-radius:8px;padding:8px 12px;background:#f9fafb}
.tile b{display:block;font-size:20px;font-variant-numeric:tabular-nums}.tile small{display:block;color:#6b7280}
.tile.bad{border-color:#fca5a5;background:#fef2f2}.tile.warn{border-color:#fcd34d;background:#fffbeb}
.todo{margin:8px 0;padding:10px 14px 10px 30px;border-left:4px solid #374151;background:#f9fafb;border-radius:4px}
.todo li{margin:3px 0}.ok{border-left-color:#059669;background:#ecfdf5}
.wide{max-width:100%}
table{border-collapse:collapse;margin:4px 0 10px;font-size:13px;max-width:100%}
th,td{border-bottom:1px solid #e5e7eb;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.id{display:inline-block;max-width:14em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:bottom;
font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.sev{display:inline-block;white-space:nowrap;padding:0 6px;border-radius:9px;font-size:12px;font-weight:600;color:#fff}
.sev.critical{background:#b91c1c}.sev.warning{background:#fff;color:#7c2d12;border:1px solid #7c2d12}
.st-resolved{color:#059669}.st-open{color:#b91c1c}
.note{background:#fef3c7;padding:6px 10px;border-radius:6px}
.legend span{display:inline-block;margin-right:14px;font-size:12px;white-space:nowrap}
.legend i{display:inline-block;width:11px;height:11px;margin-right:5px;border-radius:2px;vertical-align:middle}
.bars{width:100%}.bars td{border:0;padding:2px 6px}.bar-cell{width:60%}.bar{height:14px;border-radius:2px}
.bar-label{max-width:18em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
table.heatmap{table-layout:fixed;width:100%}
.heatmap th,.heatmap td{height:16px;padding:0;border:1px solid #fff;background:none}
.heatmap th{height:auto}.heatmap .heat-label{width:30%}.heatmap td.bar-label{padding:0 6px 0 0}
.heatmap .heat-tick{font-weight:400;font-size:11px;color:#6b7280;white-space:nowrap;overflow:visible}
.cols{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:20px}
@media (max-width:900px){.cols{grid-template-columns:minmax(0,1fr)}}
details{margin:6px 0}summary{cursor:pointer;color:#1d4ed8}svg.chart{display:block;max-width:100%;height:auto}
img{max-width:100%;border:1px solid #e5e7eb;border-radius:8px}
@media (max-width:820px){.narrow table,.narrow tbody,.narrow tr,.narrow td{display:block;width:100%}
.narrow thead{display:none}.narrow tr{border-bottom:1px solid #e5e7eb;padding:4px 0}
.narrow td{border:0;padding:1px 4px;text-align:left}.narrow td:empty{display:none}
.narrow td[data-label]::before{content:attr(data-label) ": ";color:#6b7280}.narrow td.num{text-align:left}}
.stack table,.stack tbody,.stack tr,.stack td{display:block;width:100%}.stack thead{display:none}
.stack tr{border-bottom:1px solid #e5e7eb;padding:4px 0}.stack td{border:0;padding:1px 4px}.stack td:empty{display:none}
.stack td[data-label]::before{content:attr(data-label) ": ";color:#6b7280}.stack td.num{text-align:left}
"""
)


def _cell_html(column: str, value: Any) -> str:
    """A table cell: numbers right-aligned; long ids shortened with the full value in a tooltip. ``data-label``
    names the column when a narrow screen stacks the row's cells."""
    text = format_value(column, value)
    label = f" data-label='{html_text(human_header(column))}'"
    if numeric_column(column) and isinstance(value, int | float):
        return f"<td class='num'{label}>{html_text(text)}</td>"
    limit = ID_CHARS if column in ID_COLUMNS else TEXT_CHARS
    if column in ID_COLUMNS or len(text) > limit:
        shown = text if len(text) <= limit else text[: limit - 1] + "…"
        css = "id" if column in ID_COLUMNS else ""
        return f"<td{label}><span class='{css}' title='{html_text(text)}'>{html_text(shown)}</span></td>"
    return f"<td{label}>{html_text(text)}</td>"


#: A table with more columns than this is shown as stacked rows at every width (CloudTrail rows of the audit).
STACK_COLUMNS = 8
#: ... and one with more than this stacks them on a narrow screen (a phone, a 700 px window).
NARROW_COLUMNS = 6


def _html_table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]], empty: str = "None.") -> str:
    """A table that never scrolls sideways: on a narrow screen (or with many columns) each row stacks its cells."""
    if not rows:
        return f"<p class='muted'>{html_text(empty)}</p>"
    head = "".join(
        f"<th class='{'num' if numeric_column(c) else ''}'>{html_text(human_header(c))}</th>" for c in columns
    )
    body = "".join("<tr>" + "".join(_cell_html(c, row.get(c)) for c in columns) + "</tr>" for row in rows)
    css = "wide stack" if len(columns) > STACK_COLUMNS else "wide narrow" if len(columns) > NARROW_COLUMNS else "wide"
    return f"<div class='{css}'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def tile_change(now: float, before: TrendPoint | None, figure: str = "gpu_hours") -> str:
    """Every money tile (and GPU-hours) says how it changed since the report before, or that there is none yet."""
    if before is None:
        return "no earlier report to compare"
    return delta(now, float(getattr(before, figure)), money_unit=figure.endswith("_usd"))


def _tile(value: str, label: str, sub: str = "", css: str = "") -> str:
    small = f"<small>{html_text(sub)}</small>" if sub else ""
    return f"<div class='tile {css}'><b>{html_text(value)}</b>{html_text(label)}{small}</div>"


def _tiles(report: Report) -> str:
    cost = report.cost
    before = report.previous
    critical = sum(1 for f in report.open_findings if f.severity == "critical")
    warning = sum(1 for f in report.open_findings if f.severity == "warning")
    share = f"{100 * cost.idle_cost_usd / cost.cost_total_usd:.0f}% of spend · " if cost.cost_total_usd else ""
    tiles = [
        _tile(
            f"{critical + warning:,} open",
            "findings",
            f"{critical:,} critical · {warning:,} warning · "
            f"{len(report.findings) - len(report.open_findings):,} resolved",
            "bad" if critical else ("warn" if warning else ""),
        ),
        _tile(money(cost.cost_total_usd), "GPU spend", tile_change(cost.cost_total_usd, before, "spend_usd")),
        _tile(
            money(cost.idle_cost_usd),
            "idle spend",
            share + tile_change(cost.idle_cost_usd, before, "idle_usd"),
            "warn" if cost.idle_cost_usd else "",
        ),
    ]
    if cost.idle_enforced or cost.savings_usd:
        tiles.append(
            _tile(
                money(cost.savings_usd),
                "reclaimed",
                f"{cost.idle_gpu_hours_reclaimed:,.1f} GPU-hours given back · "
                + tile_change(cost.savings_usd, before, "reclaimed_usd"),
            )
        )
    if not cost.idle_enforced:
        tiles.append(
            _tile(
                money(cost.would_save_usd),
                "would reclaim",
                f"{cost.would_reclaim_gpu_hours:,.1f} GPU-hours if idle.enforce were on · "
                + tile_change(cost.would_save_usd, before, "would_reclaim_usd"),
            )
        )
    tiles.append(_tile(f"{cost.gpu_hours_total:,.1f}", "GPU-hours", tile_change(cost.gpu_hours_total, before)))
    tiles.append(
        _tile(
            f"{cost.idle_energy_kwh:,.1f} kWh",
            "idle GPU energy",
            f"{cost.idle_co2e_kg:,.1f} kg CO2e · "
            + (f"{energy_coverage(cost)} · " if energy_coverage(cost) else "")
            + tile_change(cost.idle_energy_kwh, before, "idle_energy_kwh"),
        )
    )
    if report.budgets:
        worst = max(report.budgets, key=lambda b: b.forecast_percent)
        tiles.append(
            _tile(
                f"{worst.forecast_percent:.0f}%",
                f"forecast of budget ({worst.team})",
                f"{money(worst.spent_usd)} of {money(worst.budget_usd)} spent",
                "bad" if worst.forecast_percent >= 100 else ("warn" if worst.forecast_percent >= 80 else ""),
            )
        )
    return "<div class='tiles'>" + "".join(tiles) + "</div>"


def at_stake(finding: FindingRow) -> str:
    """The money a finding's instance costs a day while it stays open, or nothing."""
    return per_day_text(finding.usd_per_day) if finding.usd_per_day else ""


def _findings_html(report: Report, limit: int = FINDING_ROWS) -> str:
    def rows(findings: Sequence[FindingRow]) -> str:
        out = []
        for f in findings:
            resolution = f" <span class='muted'>({html_text(f.resolution)})</span>" if f.resolution else ""
            out.append(
                "<tr>"
                f"<td><span class='sev {f.severity}'>{f.severity}</span></td>"
                f"<td>{html_text(f.summary)}<br><span class='muted'>{html_text(f.remediation)}</span></td>"
                f"<td data-label='Resource'><span class='id' title='{html_text(f.resource)}'>"
                f"{html_text(f.resource)}</span></td>"
                f"<td data-label='Owner'>{html_text(f.owner)} <span class='muted'>({html_text(f.team)})</span></td>"
                f"<td class='num' data-label='Open for' title='first seen {f.first_seen:%Y-%m-%d %H:%M} UTC'>"
                f"{html_text(age_text(f.first_seen, report.end))}</td>"
                f"<td class='num' data-label='At stake'>{at_stake(f)}</td>"
                f"<td class='st-{f.status}'>{f.status}{resolution}</td>"
                "</tr>"
            )
        head = (
            "<tr><th>Severity</th><th>Finding and what to do</th><th>Resource</th><th>Owner</th>"
            "<th class='num'>Age</th><th class='num'>At stake</th><th>Status</th></tr>"
        )
        return f"<div class='wide narrow'><table><thead>{head}</thead><tbody>{''.join(out)}</tbody></table></div>"

    def more(shown: int, total: int) -> str:
        return f"<p class='muted'>…and {total - shown:,} more in findings.csv.</p>" if total > shown else ""

    open_ = report.open_findings
    resolved = [f for f in report.findings if f.status == "resolved"]
    parts = [rows(open_[:limit]) if open_ else "<p>No open warning or critical findings.</p>"]
    parts.append(more(min(len(open_), limit), len(open_)))
    if resolved:
        parts.append(
            f"<details><summary>{plural(len(resolved), 'finding')} resolved in the period</summary>"
            f"{rows(resolved[:limit])}{more(min(len(resolved), limit), len(resolved))}</details>"
        )
    return "".join(parts)


def _trends_html(report: Report) -> str:
    """A labelled bar per report (busy and idle spend, and what the governor reclaimed or would have), each with its
    change on the report before it (week over week for weekly reports), then the figures as a table."""
    points = [*report.trends, report.trend_point()]
    labels = [f"{p.start:%d %b %H:%M}" if p.kind == "custom" else f"{p.start:%a %d %b}" for p in points]
    top = max((max(p.spend_usd, p.reclaimed_usd + p.would_reclaim_usd) for p in points), default=0) or 1.0
    busy, idle, back = charting.PALETTE["busy"], charting.PALETTE["idle"], RECLAIMED_COLOUR
    body = []
    for index, (label, p) in enumerate(zip(labels, points, strict=True)):
        width = {
            "busy": 100 * max(p.spend_usd - p.idle_usd, 0) / top,
            "idle": 100 * p.idle_usd / top,
            "back": 100 * (p.reclaimed_usd or p.would_reclaim_usd) / top,
        }
        previous = points[index - 1] if index else None
        change = delta(p.spend_usd, previous.spend_usd if previous else None) or "first report"
        given = (
            f"reclaimed {money(p.reclaimed_usd)}" if p.reclaimed_usd else f"would reclaim {money(p.would_reclaim_usd)}"
        )
        body.append(
            f"<tr><td class='bar-label'>{html_text(label)}</td><td class='bar-cell'>"
            f"<div class='bar' style='display:inline-block;width:{width['busy']:.1f}%;background:{busy}'></div>"
            f"<div class='bar' style='display:inline-block;width:{width['idle']:.1f}%;background:{idle}'></div>"
            f"<div class='bar' style='height:5px;width:{width['back']:.1f}%;background:{back}'></div></td>"
            f"<td>{money(p.spend_usd)} spent, {money(p.idle_usd)} idle; {given}"
            f"<br><span class='muted'>{html_text(change)}</span></td></tr>"
        )
    legend = (
        f"<p class='legend'><span><i style='background:{busy}'></i>spend on busy or unmonitored GPUs</span>"
        f"<span><i style='background:{idle}'></i>idle spend</span>"
        f"<span><i style='background:{back}'></i>reclaimed by the governor (report-only: would reclaim)</span></p>"
    )
    rows: list[dict[str, Any]] = [
        {
            "period": label,
            "spend_usd": p.spend_usd,
            "idle_usd": p.idle_usd,
            "reclaimed_usd": p.reclaimed_usd,
            "would_reclaim_usd": p.would_reclaim_usd,
            "gpu_hours": p.gpu_hours,
            "open_critical": p.open_critical,
            "open_warning": p.open_warning,
        }
        for label, p in zip(labels, points, strict=True)
    ]
    columns = list(rows[0])
    chart = (
        f"<table class='bars trend' aria-label='spend per {report.kind} report'><tbody>{''.join(body)}</tbody></table>"
    )
    return chart + "</table>" + legend + _html_table(columns, rows)


def _audit_html(report: Report, compact: bool = False) -> str:
    compare = any(q.previous_count is not None for q in report.security)
    overview = []
    for q in report.security:
        row: dict[str, Any] = {"query": q.name.replace("_", " "), "count": q.count}
        if compare:
            row["change"] = q.change_text() if q.change is not None else ""
        row["watches"] = q.error or q.description
        overview.append(row)
    columns = ["query", "count", *(["change"] if compare else []), "watches"]
    parts = [
        "<p class='muted'>API calls the CIS monitoring queries match in CloudTrail. These are activity worth a look, "
        "not findings: most are routine.</p>",
        _html_table(columns, overview, "No audit queries ran."),
    ]
    for query in report.security:
        if not query.count or compact:
            continue
        shown = len(query.top_rows)
        parts.append(
            f"<details><summary>{html_text(query.name.replace('_', ' '))}: "
            f"{plural(query.count, 'event')}"
            + (f", first {shown} shown" if shown < query.count else "")
            + f" (all in security_{html_text(query.name)}.csv)</summary>"
            + _html_table(query.columns, query.top_rows)
            + "</details>"
        )
    return "".join(parts)


def render_html(
    report: Report,
    chart_src: str | None = None,
    *,
    inline_svg: bool = True,
    tables_note: str = "Every table is archived in full as CSV next to this page.",
    compact: bool = False,
) -> str:
    """A self-contained page (inline CSS), ordered as a reader acts: today's to-do, money, trends, audit activity.

    The fleet chart is inline SVG for browsers; ``chart_src`` (a file name, ``cid:...`` or a data URI) adds the same
    chart as a PNG, which is what email clients that drop SVG show (``inline_svg=False`` for email). ``tables_note``
    (HTML) says where the tables are: attached, or archived behind the report's link (``governor.report.email``).
    ``compact`` (an email that must fit its budget) leaves out the utilisation heatmap and each audit query's rows;
    the counts stay, the rows are in the CSVs.
    """
    parts = [*_head(report), _todo_html(report), *_overview(report)]
    parts.append(
        f"<h2>Needs attention <span class='muted'>({plural(len(report.open_findings), 'open finding')})</span></h2>"
    )
    parts.append(_findings_html(report, FINDING_ROWS if inline_svg else EMAIL_FINDING_ROWS))
    parts += _money(report, chart_src, inline_svg, compact)
    if report.trends:
        parts.append(f"<h2>Trend over the last {plural(len(report.trends) + 1, report.kind + ' report')}</h2>")
        parts.append(_trends_html(report))
    parts.append("<h2>Audit activity (CIS monitoring queries)</h2>")
    parts.append(_audit_html(report, compact))
    if report.dashboard_url:
        url = html_text(report.dashboard_url)
        parts.append(f"<p><a href='{url}'>CloudWatch dashboard</a></p>")
    parts.append(f"<p class='muted'>{tables_note}</p></body></html>")
    return "\n".join(parts)


def _head(report: Report) -> list[str]:
    """The document head, the title and when the report was made, with the link to the archived copy."""
    link = ""
    if report.report_url:
        expires = report.report_url_expires
        link = f" · <a href='{html_text(report.report_url)}'>full report</a>" + (
            f" (link expires {expires:%d %b %H:%M} UTC)" if expires else ""
        )
    return [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        f"<title>{html_text(title(report))}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html_text(title(report))}</h1>",
        f"<p class='muted'>Generated {report.generated_at:%d %b %Y %H:%M} UTC" + link + "</p>",
    ]


def _todo_html(report: Report) -> str:
    todo = todo_items(report)
    if todo:
        return "<ol class='todo'>" + "".join(f"<li>{html_text(t)}</li>" for t in todo) + "</ol>"
    return "<p class='todo ok'>Nothing needs doing today: no open warning or critical findings.</p>"


def _overview(report: Report) -> list[str]:
    """The tiles, spend and idle spend by team, by account and region, and the report's notes."""
    cost = report.cost
    team_rows = cost.by_team.rows[:8]
    parts = [_tiles(report), "<div class='cols'><div>", "<h3>Spend by team</h3>"]
    parts.append(_html_table(cost.by_team.columns, team_rows, "No GPU usage recorded in this period."))
    if len(cost.by_team.rows) > len(team_rows):
        parts.append(f"<p class='muted'>All {len(cost.by_team.rows):,} teams in gpu_hours_by_team.csv.</p>")
    parts.append("</div><div><h3>Idle spend by team</h3>")
    parts.append(charting.bars_html(report.charts.idle_cost_by_team))
    parts.append("</div></div>")
    if cost.by_account is not None:
        parts.append(f"<h3>{html_text(cost.by_account.title)}</h3>")
        parts.append(_html_table(cost.by_account.columns, cost.by_account.rows[:20]))
        if len(cost.by_account.rows) > 20:
            parts.append(f"<p class='muted'>All {len(cost.by_account.rows):,} in {cost.by_account.name}.csv.</p>")
    parts += [f"<p class='note'>{html_text(n)}</p>" for n in report.notes]
    return parts


def _money(report: Report, chart_src: str | None, inline_svg: bool, compact: bool = False) -> list[str]:
    """The money section: the fleet chart, budgets, idle spend and its offenders, spend tables, Spot, rightsizing."""
    cost = report.cost
    parts = ["<h2>Money</h2>", *[f"<p class='note'>{html_text(n)}</p>" for n in cost.notes]]
    parts += _fleet_chart(report, chart_src, inline_svg)
    if report.budgets:
        parts.append("<h3>Monthly budgets</h3>")
        table = report.budgets_table()
        parts.append(_html_table(table.columns, table.rows))
    parts.append(_idle_line(cost))
    priced = governor_cost_text(cost)
    if priced:
        parts.append(f"<p class='note'>{html_text(priced)}</p>")
    offenders = cost.offenders
    parts.append("<h3>Top idle offenders</h3>")
    parts.append(_html_table(offenders.columns, offenders.rows[:10], "No idle GPU instances in this period."))
    if len(offenders.rows) > 10:
        parts.append(f"<p class='muted'>All {len(offenders.rows):,} in idle_offenders.csv.</p>")
    parts.append(f"<h3>{html_text(cost.energy.title)}</h3><p>{html_text(sentence(energy_text(cost)))}.</p>")
    parts.append(_html_table(cost.energy.columns, cost.energy.rows, "No idle GPU time in this period."))
    parts += _paid_unused(cost)
    parts += _coverage(cost)
    if report.charts.heatmap and not compact:
        parts.append("<h3>Busiest GPU's utilisation, top idle offenders</h3>")
        parts.append(charting.heatmap_html(report.charts, tooltips=inline_svg))
    for table in (*([cost.by_namespace] if cost.by_namespace is not None else []), cost.by_owner, cost.by_type):
        parts.append(f"<h3>{html_text(table.title)}</h3>")
        parts.append(_html_table(table.columns, table.rows[:10]))
        if len(table.rows) > 10:
            parts.append(f"<p class='muted'>All {len(table.rows):,} rows in {table.name}.csv.</p>")
    parts += _spot(cost.spot)
    parts.append(f"<h3>{html_text(cost.rightsizing.title)}</h3>")
    parts.append(_html_table(cost.rightsizing.columns, cost.rightsizing.rows[:10], "No candidates."))
    tags = report.governor_tags
    if tags.rows:
        parts.append(f"<h3>{html_text(tags.title)}</h3>")
        parts.append(_html_table(tags.columns, tags.rows[:20]))
        if len(tags.rows) > 20:
            parts.append(f"<p class='muted'>All {len(tags.rows):,} in {tags.name}.csv.</p>")
    return parts


def _fleet_chart(report: Report, chart_src: str | None, inline_svg: bool) -> list[str]:
    """The fleet's GPU-hours chart: inline SVG for browsers, or the PNG at ``chart_src`` for email."""
    minutes = report.charts.bucket_minutes
    step = plural(minutes, "minute") if minutes < 120 else plural(minutes // 60, "hour")
    parts = [f"<h3>Fleet GPU-hours: busy, idle and unmonitored <span class='muted'>(GPU-hours per {step})</span></h3>"]
    if report.charts.empty:
        return [*parts, "<p class='muted'>No GPU usage sessions in this period.</p>"]
    if inline_svg:
        parts.append(charting.usage_svg(report.charts, report.end))
    if chart_src and not inline_svg:
        parts.append(f"<img src='{html_text(chart_src)}' alt='Fleet GPU-hours: busy, idle and unmonitored'>")
    return [*parts, charting.legend_html()]


def _paid_unused(cost: CostSection) -> list[str]:
    """Idle reserved capacity: paid for whatever happens, so never a saving; hand it over or stop buying it."""
    table = cost.paid_unused
    if not table.rows:
        return []
    return [
        f"<h3>{html_text(table.title)}</h3>",
        f"<p>{cost.paid_unused_gpu_hours:,.1f} GPU-hours of Capacity Blocks and capacity reservations sat idle or "
        f"empty ({money(cost.paid_unused_usd)} paid for, unused). Stopping them saves nothing; launch work into "
        "them, offer the capacity to another team before the block ends, or stop buying it.</p>",
        _html_table(table.columns, table.rows[:10]),
    ]


def _coverage(cost: CostSection) -> list[str]:
    """How much of the GPU fleet's use Savings Plans and Reserved Instances covered: what is left is On-Demand."""
    said = coverage_text(cost.savings_plans_coverage_pct, cost.reserved_coverage_pct, cost.coverage_source)
    if said is None:
        return []

    def pct(value: float | None) -> str:
        return f"{value:.1f}%" if value is not None else "no GPU usage"

    rows = [
        {"commitment": "Savings Plans", "coverage": pct(cost.savings_plans_coverage_pct), "measured_by": "spend"},
        {"commitment": "Reserved Instances", "coverage": pct(cost.reserved_coverage_pct), "measured_by": "hours"},
    ]
    return [
        "<h3>Savings Plans and RI coverage of the GPU fleet</h3>",
        f"<p>{html_text(sentence(said))}.</p>",
        _html_table(["commitment", "coverage", "measured_by"], rows),
    ]


def _idle_line(cost: CostSection) -> str:
    """Idle GPU-hours and dollars, and what was reclaimed (or, report-only, what enforcing would have reclaimed)."""
    if cost.idle_enforced or cost.savings_usd:
        outcome = (
            f"{plural(cost.idle_actions, 'instance')} stopped or terminated, "
            f"{cost.idle_gpu_hours_reclaimed:,.1f} GPU-hours reclaimed, {money(cost.savings_usd)} saved"
        )
    else:
        outcome = (
            f"report-only: enforcement would reclaim {cost.would_reclaim_gpu_hours:,.1f} GPU-hours, "
            f"{money(cost.would_save_usd)}"
        )
    return (
        f"<p>Idle: {cost.idle_gpu_hours_detected:,.1f} GPU-hours on "
        f"{plural(cost.idle_instances_detected, 'instance')} ({money(cost.idle_cost_usd)}); "
        + outcome
        + f" (prices as of {html_text(cost.prices_as_of)}).</p>"
    )


def _spot(stats: SpotStats) -> list[str]:
    parts = [
        "<h3>Spot</h3>",
        f"<p>{plural(stats.interruptions, 'interruption')}, "
        f"{plural(stats.rebalance_recommendations, 'rebalance recommendation')}; checkpoints "
        f"{stats.checkpoints_delivered:,} delivered of {stats.checkpoints_requested:,} sent, "
        f"{stats.checkpoints_succeeded:,} finished successfully.</p>",
    ]
    if stats.by_pool.rows:
        parts.append(_html_table(stats.by_pool.columns, stats.by_pool.rows))
    return parts
