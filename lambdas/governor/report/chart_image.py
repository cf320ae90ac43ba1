"""The fleet chart as a PNG, for email and the archive: matplotlib, drawn from the report's own chart data.

The HTML report draws the same data as inline SVG (``governor.report.charts``); both use ``charts.PALETTE``, so busy,
idle and unmonitored have the same colours in the browser, in the email and in the PNG. matplotlib ships in the
Lambda layer (``lambdas/requirements.txt``) and is imported on first use; where it is missing, the report function
falls back to CloudWatch's ``GetMetricWidgetImage`` (``CloudWatchChart``) with the same colours.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Mapping
from typing import Any

from governor.adapters.aws import client
from governor.report.charts import PALETTE, FleetCharts

IAM_ACTIONS = frozenset({"cloudwatch:GetMetricWidgetImage"})


class CloudWatchChart:
    """Renders a metric widget definition (see ``governor.report.charts.utilisation_widget``) to PNG bytes."""

    def __init__(self, region: str | None = None) -> None:
        self._cloudwatch = client("cloudwatch", region)

    def render(self, widget: Mapping[str, Any]) -> bytes:
        response = self._cloudwatch.get_metric_widget_image(MetricWidget=json.dumps(widget), OutputFormat="png")
        return bytes(response["MetricWidgetImage"])


def render_fleet_png(
    data: FleetCharts,
    *,
    title: str,
    period: tuple[dt.datetime, dt.datetime],
    width_px: int = 900,
    height_px: int = 360,
) -> bytes:
    """Stacked busy / idle / unmonitored GPU-hours per bucket; the legend sits under the plot, never over it."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num

    dpi = 100
    figure, axes = plt.subplots(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
    try:
        if data.usage and not data.empty:
            xs = date2num([b.start for b in data.usage])
            width = data.bucket_minutes / (24 * 60) * 0.9
            bottom = [0.0] * len(data.usage)
            labels = {"busy": "busy", "idle": "idle", "unmonitored": "unmonitored (no sample)"}
            for name, label in labels.items():
                values = [getattr(b, name) for b in data.usage]
                axes.bar(xs, values, width=width, bottom=bottom, color=PALETTE[name], label=label, align="edge")
                bottom = [a + b for a, b in zip(bottom, values, strict=True)]
            figure.legend(loc="lower center", ncol=3, frameon=False, fontsize="small")
        else:
            axes.text(
                0.5,
                0.5,
                "no GPU usage sessions in this period",
                ha="center",
                va="center",
                transform=axes.transAxes,
                color=PALETTE["text"],
            )
        axes.set_xlim(float(date2num(period[0])), float(date2num(period[1])))
        axes.set_ylabel("GPU-hours")
        axes.set_title(title, fontsize="medium", color=PALETTE["text"])
        axes.grid(True, axis="y", color=PALETTE["grid"])
        axes.set_axisbelow(True)
        for side in ("top", "right"):
            axes.spines[side].set_visible(False)
        locator = AutoDateLocator()
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        figure.tight_layout(rect=(0, 0.08, 1, 1))
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(figure)


def widget_colours(widget: dict[str, Any]) -> dict[str, Any]:
    """The CloudWatch fallback widget in the report's palette (the busy colour for the utilisation lines)."""
    for metric in widget.get("metrics", []):
        if metric and isinstance(metric[-1], dict):
            metric[-1].setdefault("color", PALETTE["busy"])
    for line in widget.get("annotations", {}).get("horizontal", []):
        line.setdefault("color", PALETTE["idle"])
    return widget
