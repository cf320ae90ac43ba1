"""Fleet-level chart data and its SVG rendering: views that stay readable at 1,000 instances.

Per-instance lines stop being readable at about ten instances, so the report draws the fleet instead:

- GPU-hours per time bucket, stacked into busy, idle (inside a window judged idle, by the decisions of the capability
  recording idle GPU time: ``REGISTRY.idle_time()``) and unmonitored (running, but none of its samples in the bucket,
  or only decisions saying it had no usable data, so nobody knows);
- idle dollars by team;
- a heat map of the busiest GPU's utilisation for the top idle offenders only (at most ``HEATMAP_ROWS`` rows).

The data is pure and JSON-able (it is archived in report.json); the HTML report draws it as inline SVG here and the
PNG (email, archive) is drawn by ``governor.report.chart_image`` with matplotlib from the same data and ``PALETTE``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import Field

from governor.domain import costs
from governor.domain.escape import html_text
from governor.domain.model import Model
from governor.domain.times import parse_time
from governor.registry import REGISTRY

# One palette for HTML, email and PNG (colour-blind safe: blue / orange / grey, after the Okabe-Ito set), one
# meaning per colour everywhere in the report: blue is busy, orange is idle (GPU-hours and the dollars they cost),
# grey is "no sample". The heat map shades blue only, so a quarter-busy GPU never looks like an idle one.
PALETTE = {
    "busy": "#0072b2",
    "idle": "#e69f00",
    "unmonitored": "#a3a3a3",
    "grid": "#e5e7eb",
    "text": "#374151",
    "empty": "#a3a3a3",
}
# Heat map: 0 % (pale) to 100 % (busy, dark blue), in HEAT_LEVELS steps (a class each, so the email stays small);
# cells without a sample are PALETTE["empty"], the chart's "unmonitored" grey.
HEAT_STOPS = ((0.0, (239, 246, 255)), (1.0, (0, 114, 178)))
HEAT_LEVELS = 6
HEATMAP_ROWS = 10
MAX_BARS = 48


class UsageBucket(Model):
    """GPU-hours in one time bucket, split by what the governor knew about them."""

    start: dt.datetime
    busy: float = 0.0
    idle: float = 0.0
    unmonitored: float = 0.0


class HeatRow(Model):
    """One top offender: its label and the busiest GPU's maximum utilisation per bucket (None: no sample)."""

    label: str
    values: list[float | None]


class FleetCharts(Model):
    """Everything the report draws, in the order it draws it."""

    bucket_minutes: int = 60
    usage: list[UsageBucket] = Field(default_factory=list)
    idle_cost_by_team: list[tuple[str, float]] = Field(default_factory=list)
    heatmap: list[HeatRow] = Field(default_factory=list)
    heatmap_starts: list[dt.datetime] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not any(b.busy or b.idle or b.unmonitored for b in self.usage)


def bucket_size(start: dt.datetime, end: dt.datetime) -> dt.timedelta:
    """Hourly for a day, four-hourly for a week: at most ``MAX_BARS`` bars, never finer than 15 minutes."""
    span = (end - start).total_seconds()
    for minutes in (15, 30, 60, 120, 240, 360, 720, 1440):
        if span / (minutes * 60) <= MAX_BARS:
            return dt.timedelta(minutes=minutes)
    return dt.timedelta(seconds=span / MAX_BARS)


def _overlap(a: tuple[dt.datetime, dt.datetime], b: tuple[dt.datetime, dt.datetime]) -> float:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return max((hi - lo).total_seconds(), 0.0) / 3600.0


def fleet_usage(items: Sequence[Mapping[str, Any]], start: dt.datetime, end: dt.datetime) -> list[UsageBucket]:
    """GPU-hours per bucket, stacked busy / idle / unmonitored (see the module docstring).

    Linear in sessions times the buckets each spans, plus one pass over the idle decisions: 1,000 instances over a
    week is 1,000 x 42 cells.
    """
    step = bucket_size(start, end)
    count = max(1, int(-(-(end - start) // step)))
    edges = [start + step * i for i in range(count)]
    buckets = [UsageBucket(start=edge) for edge in edges]
    sampled: dict[str, set[int]] = defaultdict(set)
    idle_time = REGISTRY.idle_time()
    for item in items:
        if not idle_time.sampled(item):
            continue
        at = parse_time(item.get("at"))
        if at is not None and start <= at < end:
            sampled[str(item.get("resource"))].add(int((at - start) // step))
    idle_windows = idle_time.windows(items)
    for session in costs.sessions_of(items):
        began = parse_time(session.get("start"))
        if began is None:
            continue
        finished = min(parse_time(session.get("end")) or end, end)
        began = max(began, start)
        if finished <= began:
            continue
        gpus = float(session.get("gpus") or 1)
        instance = str(session.get("instance_id"))
        windows = idle_windows.get(instance, [])
        first = int((began - start) // step)
        last = min(count - 1, int((finished - start - dt.timedelta(microseconds=1)) // step))
        for index in range(first, last + 1):
            cell = (max(began, edges[index]), min(finished, edges[index] + step))
            hours = _overlap(cell, cell)
            if hours <= 0:
                continue
            idle = min(hours, sum(_overlap(cell, w) for w in windows))
            bucket = buckets[index]
            bucket.idle += idle * gpus
            if index in sampled.get(instance, ()):
                bucket.busy += (hours - idle) * gpus
            else:
                bucket.unmonitored += (hours - idle) * gpus
    for bucket in buckets:
        bucket.busy, bucket.idle, bucket.unmonitored = (
            round(bucket.busy, 3),
            round(bucket.idle, 3),
            round(bucket.unmonitored, 3),
        )
    return buckets


def heatmap(
    items: Iterable[Mapping[str, Any]],
    start: dt.datetime,
    end: dt.datetime,
    instances: Sequence[tuple[str, str]],
) -> tuple[list[dt.datetime], list[HeatRow]]:
    """The busiest GPU's maximum utilisation per bucket for ``instances`` ((id, label) pairs, top offenders first)."""
    step = bucket_size(start, end)
    count = max(1, int(-(-(end - start) // step)))
    wanted = {instance_id: index for index, (instance_id, _) in enumerate(instances[:HEATMAP_ROWS])}
    grid: list[list[float | None]] = [[None] * count for _ in wanted]
    idle_time = REGISTRY.idle_time()
    for item in items:
        if not idle_time.decided(item):
            continue
        row = wanted.get(str(item.get("resource")))
        at = parse_time(item.get("at"))
        value = (item.get("evidence") or {}).get("max_gpu_utilization")
        if row is None or at is None or not (start <= at < end) or not isinstance(value, int | float):
            continue
        column = int((at - start) // step)
        current = grid[row][column]
        grid[row][column] = float(value) if current is None else max(current, float(value))
    rows = [HeatRow(label=label, values=grid[i]) for i, (_, label) in enumerate(instances[:HEATMAP_ROWS])]
    return [start + step * i for i in range(count)], rows


def heat_level(value: float | None) -> str:
    """The heat map's class for a utilisation percentage: ``hn`` (no sample) or ``h0`` .. ``h5``."""
    if value is None:
        return "hn"
    x = min(max(value / 100.0, 0.0), 1.0)
    return f"h{min(int(x * HEAT_LEVELS), HEAT_LEVELS - 1)}"


def heat_colour(value: float | None) -> str:
    """The colour of a heat map cell: the middle of its level, between the two ``HEAT_STOPS``."""
    level = heat_level(value)
    if level == "hn":
        return PALETTE["empty"]
    t = (int(level[1:]) + 0.5) / HEAT_LEVELS
    (_, c0), (_, c1) = HEAT_STOPS
    r, g, b = (round(a + (z - a) * t) for a, z in zip(c0, c1, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def heat_css() -> str:
    """One CSS rule per heat level, shared by every cell (inline colours made the heat map most of the email)."""
    levels = [f".heatmap .h{i}{{background:{heat_colour((i + 0.5) * 100 / HEAT_LEVELS)}}}" for i in range(HEAT_LEVELS)]
    return "".join(levels) + f".heatmap .hn{{background:{PALETTE['empty']}}}"


def _tick_label(at: dt.datetime, step_minutes: int, span: dt.timedelta) -> str:
    if span > dt.timedelta(days=2):
        return f"{at:%a %d}" if at.hour == 0 else f"{at:%H:%M}"
    return f"{at:%H:%M}"


def nice_scale(value: float, ticks: int = 4) -> tuple[float, float]:
    """An axis maximum and tick step from 1, 2, 2.5 or 5 times a power of ten, so every tick label is round."""
    if value <= 0:
        return 1.0, 0.25
    raw = value / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return step * math.ceil(value / step - 1e-9), step


def usage_svg(charts: FleetCharts, end: dt.datetime) -> str:
    """Stacked columns of GPU-hours per bucket; scales with its container (``viewBox``, width 100%)."""
    width, height, left, bottom, top = 900, 260, 48, 28, 12
    buckets = charts.usage
    if not buckets:
        return ""
    totals = [b.busy + b.idle + b.unmonitored for b in buckets]
    y_max, y_step = nice_scale(max(totals))
    plot_w, plot_h = width - left - 8, height - bottom - top
    bar = plot_w / len(buckets)
    parts = [
        f"<svg class='chart' viewBox='0 0 {width} {height}' width='100%' role='img' "
        "aria-label='GPU-hours per interval: busy, idle and unmonitored' xmlns='http://www.w3.org/2000/svg'>"
    ]
    for tick in range(round(y_max / y_step) + 1):
        value = y_step * tick
        y = top + plot_h - plot_h * value / y_max
        parts.append(f"<line x1='{left}' x2='{width - 8}' y1='{y:.1f}' y2='{y:.1f}' stroke='{PALETTE['grid']}'/>")
        parts.append(
            f"<text x='{left - 6}' y='{y + 4:.1f}' text-anchor='end' font-size='13' fill='{PALETTE['text']}'>"
            f"{value:,g}</text>"
        )
    span = end - buckets[0].start
    every = max(1, len(buckets) // 8)
    for i, bucket in enumerate(buckets):
        x = left + i * bar
        y = top + plot_h
        tip = (
            f"{bucket.start:%Y-%m-%d %H:%M} UTC: busy {bucket.busy:,.1f}, idle {bucket.idle:,.1f}, "
            f"unmonitored {bucket.unmonitored:,.1f} GPU-hours"
        )
        parts.append(f"<g><title>{html_text(tip)}</title>")
        for name in ("busy", "idle", "unmonitored"):
            value = getattr(bucket, name)
            h = plot_h * value / y_max
            if h <= 0:
                continue
            y -= h
            parts.append(
                f"<rect x='{x + 1:.1f}' y='{y:.1f}' width='{max(bar - 2, 1):.1f}' height='{h:.1f}' "
                f"fill='{PALETTE[name]}'/>"
            )
        parts.append("</g>")
        if i % every == 0:
            label = _tick_label(bucket.start, charts.bucket_minutes, span)
            parts.append(
                f"<text x='{x + bar / 2:.1f}' y='{height - 10}' text-anchor='middle' font-size='13' "
                f"fill='{PALETTE['text']}'>{label}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def legend_html() -> str:
    """The stacked chart's legend as HTML, so it wraps on a narrow screen instead of covering the plot."""
    names = {"busy": "busy", "idle": "idle (judged idle by the idle policy)", "unmonitored": "unmonitored (no sample)"}
    return (
        "<p class='legend'>"
        + "".join(
            f"<span><i style='background:{PALETTE[key]}'></i>{html_text(text)}</span>" for key, text in names.items()
        )
        + "</p>"
    )


def bars_html(rows: Sequence[tuple[str, float]], money: bool = True) -> str:
    """Horizontal bars as an HTML table (renders the same in a browser and in email clients that drop SVG)."""
    if not rows:
        return "<p class='muted'>No idle spend in this period.</p>"
    top = max(value for _, value in rows) or 1.0
    body = []
    for label, value in rows:
        share = max(1, round(100 * value / top)) if value > 0 else 0
        shown = f"${value:,.2f}" if money else f"{value:,.1f}"
        body.append(
            f"<tr><td class='bar-label' title='{html_text(label)}'>{html_text(label)}</td>"
            f"<td class='bar-cell'><div class='bar' style='width:{share}%;background:{PALETTE['idle']}'></div></td>"
            f"<td class='num'>{shown}</td></tr>"
        )
    return "<table class='bars'><tbody>" + "".join(body) + "</tbody></table>"


def heatmap_html(charts: FleetCharts, *, tooltips: bool = True) -> str:
    """The top offenders' utilisation as a table of shaded cells (``tooltips``: each cell's time and value; the email
    leaves them out to stay small). Fixed layout: the cells narrow with the window instead of scrolling sideways."""
    if not charts.heatmap:
        return ""
    every = max(1, len(charts.heatmap_starts) // 6)
    head = "".join(
        f"<th class='heat-tick'>{at:%H:%M}</th>" if i % every == 0 else "<th></th>"
        for i, at in enumerate(charts.heatmap_starts)
    )
    rows = []
    for row in charts.heatmap:
        if tooltips:
            cells = "".join(
                f"<td class='{heat_level(v)}' title='{at:%H:%M} {'no sample' if v is None else f'{v:.0f}%'}'></td>"
                for at, v in zip(charts.heatmap_starts, row.values, strict=True)
            )
        else:  # runs of one level as one cell: an idle row is mostly one long run
            runs = [(level, len(list(group))) for level, group in itertools.groupby(heat_level(v) for v in row.values)]
            cells = "".join(
                f"<td class={level}></td>" if n == 1 else f"<td colspan={n} class={level}></td>" for level, n in runs
            )
        rows.append(f"<tr><td class='bar-label' title='{html_text(row.label)}'>{html_text(row.label)}</td>{cells}</tr>")
    scale = (
        "".join(f"<span><i class='{heat_level(v)}'></i>{v}%</span>" for v in (0, 20, 40, 60, 80, 100))
        + "<span><i class='hn'></i>no sample</span>"
    )
    return (
        "<table class='heatmap'><thead><tr><th class='heat-label'></th>"
        + head
        + "</tr></thead><tbody>"
        + "".join(rows)
        + f"</tbody></table><p class='legend heatmap'>{scale}</p>"
    )


def utilisation_widget(region: str, start: dt.datetime, end: dt.datetime, threshold: float) -> dict[str, Any]:
    """A CloudWatch metric widget for ``GetMetricWidgetImage``: every instance's busiest GPU, hourly maximum."""
    period = 3600 if (end - start) > dt.timedelta(days=1) else 300
    return {
        "title": "Fleet GPU utilisation (busiest GPU per instance)",
        "view": "timeSeries",
        "region": region,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "width": 900,
        "height": 360,
        "stat": "Maximum",
        "period": period,
        "yAxis": {"left": {"min": 0, "max": 100, "label": "%", "showUnits": False}},
        "metrics": [
            [
                {
                    "expression": (
                        "SEARCH('{CWAgent,InstanceId} MetricName=\"nvidia_smi_utilization_gpu\"', "
                        f"'Maximum', {period})"
                    ),
                    "id": "e1",
                    "label": "",
                }
            ]
        ],
        "annotations": {"horizontal": [{"label": "rightsizing threshold", "value": threshold}]},
    }
