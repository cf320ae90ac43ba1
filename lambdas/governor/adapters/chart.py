"""The fleet GPU utilisation chart as a PNG: CloudWatch ``GetMetricWidgetImage`` in the cloud, matplotlib locally.

matplotlib is a local-only dependency (``requirements.txt``, not the Lambda layer); it is imported on first use.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from governor.adapters.aws import client

IAM_ACTIONS = frozenset({"cloudwatch:GetMetricWidgetImage"})


class CloudWatchChart:
    """Renders a metric widget definition (see ``governor.domain.report.utilisation_widget``) to PNG bytes."""

    def __init__(self, region: str | None = None) -> None:
        self._cloudwatch = client("cloudwatch", region)

    def render(self, widget: Mapping[str, Any]) -> bytes:
        response = self._cloudwatch.get_metric_widget_image(MetricWidget=json.dumps(widget), OutputFormat="png")
        return bytes(response["MetricWidgetImage"])


def render_local_png(
    series: Mapping[str, Sequence[tuple[dt.datetime, float]]],
    *,
    title: str,
    threshold: float | None = None,
    period: tuple[dt.datetime, dt.datetime] | None = None,
    width_px: int = 900,
    height_px: int = 360,
) -> bytes:
    """One line per instance (its busiest GPU); an empty period still renders, saying there were no samples."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.dates import DateFormatter, date2num

    dpi = 100
    figure, axes = plt.subplots(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
    try:
        plotted = 0
        for name, points in sorted(series.items()):
            ordered = sorted(points)
            if not ordered:
                continue
            axes.plot(date2num([p[0] for p in ordered]), [p[1] for p in ordered], marker="o", markersize=3, label=name)
            plotted += 1
        if threshold is not None:
            axes.axhline(threshold, color="#d97706", linestyle="--", linewidth=1, label=f"rightsizing {threshold:g}%")
        if not plotted:
            axes.text(
                0.5,
                0.5,
                "no GPU utilisation samples in this period",
                ha="center",
                va="center",
                transform=axes.transAxes,
                color="#6b7280",
            )
        if period is not None:
            axes.set_xlim(float(date2num(period[0])), float(date2num(period[1])))
        axes.set_ylim(0, 100)
        axes.set_ylabel("max GPU utilisation (%)")
        axes.set_title(title)
        axes.grid(True, alpha=0.3)
        axes.xaxis.set_major_formatter(DateFormatter("%m-%d %H:%M"))
        figure.autofmt_xdate()
        if plotted or threshold is not None:
            axes.legend(loc="upper right", fontsize="small", ncol=2)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        return buffer.getvalue()
    finally:
        plt.close(figure)
