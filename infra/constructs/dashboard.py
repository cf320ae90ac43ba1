"""The fleet dashboard: GPU health from the CloudWatch agent, what the governor decided, and whether it is healthy.

Enforcer errors and DLQ depth are CloudWatch SEARCH expressions over the stack's own function and queue names, so
every capability appears on the dashboard whatever order the stack composes them in.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from governor.observability import NAMESPACE, SERVICE

GPU_METRICS = (
    ("nvidia_smi_utilization_gpu", "GPU utilisation (busiest GPU per instance, %)", "Maximum"),
    ("nvidia_smi_memory_used", "GPU memory used (per instance, MiB)", "Maximum"),
    ("nvidia_smi_temperature_gpu", "GPU temperature (hottest GPU per instance, °C)", "Maximum"),
)
GOVERNOR_METRICS = (("IdleWarnings", "idle warnings"), ("IdleActions", "idle stops / terminations"))
#: Counts that mean something was not done; each has an alarm and a runbook line in docs/reliability.md ("Runbook").
NOT_DONE_METRICS = (
    ("IdleActionFailures", "idle acts that failed (retried next sweep)"),
    ("FindingsUnsent", "findings the bus refused (kept in the outbox)"),
    ("IdleWarningsUnpublished", "idle warnings not yet published (no clock started)"),
)


def governor_metric(name: str, period: Duration, label: str | None = None) -> cloudwatch.Metric:
    """A count the governor's functions publish (governor.observability's namespace and service), summed."""
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"service": SERVICE},
        statistic="Sum",
        period=period,
        label=label,
    )


def _search(expression: str, period: Duration) -> cloudwatch.MathExpression:
    """A SEARCH expression: one line per matching series (label empty, so CloudWatch names each series)."""
    return cloudwatch.MathExpression(expression=expression, label="", period=period, using_metrics={})


class Dashboard(Construct):
    """One CloudWatch dashboard; ``url`` is the console link the Slack report points to."""

    def __init__(self, scope: Construct, construct_id: str, *, stack_name: str) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        # Dashboard names are global to the account: the region keeps regional stacks apart.
        self.name = f"{stack_name}-fleet-{stack.region}"
        five = Duration.minutes(5)
        self.dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=self.name, default_interval=Duration.days(1)
        )
        gpu = [
            cloudwatch.GraphWidget(
                title=title,
                width=8,
                left=[_search(f"SEARCH('{{CWAgent,InstanceId}} MetricName=\"{metric}\"', '{stat}', 300)", five)],
                left_y_axis=cloudwatch.YAxisProps(min=0),
            )
            for metric, title, stat in GPU_METRICS
        ]
        verdicts = cloudwatch.GraphWidget(
            title="Idle verdicts and actions",
            width=8,
            left=[governor_metric(name, Duration.hours(1), label) for name, label in GOVERNOR_METRICS],
        )
        interruptions = cloudwatch.GraphWidget(
            title="Spot interruptions and rebalance recommendations",
            width=8,
            left=[_search(f"SEARCH('{{{NAMESPACE},service}} Spot', 'Sum', 3600)", Duration.hours(1))],
        )
        errors = cloudwatch.GraphWidget(
            title="Enforcer errors (governor functions)",
            width=8,
            left=[
                _search(f"SEARCH('{{AWS/Lambda,FunctionName}} MetricName=\"Errors\" {stack_name}', 'Sum', 300)", five)
            ],
        )
        dlq = cloudwatch.GraphWidget(
            title="Dead-letter queue depth",
            width=12,
            left=[
                _search(
                    'SEARCH(\'{AWS/SQS,QueueName} MetricName="ApproximateNumberOfMessagesVisible" '
                    f"{stack_name} Dlq', 'Maximum', 300)",
                    five,
                )
            ],
        )
        notifications = cloudwatch.GraphWidget(
            title="Notifications sent, merged and failed",
            width=12,
            left=[
                governor_metric(name, Duration.hours(1))
                for name in (
                    "NotificationsSent",
                    "FindingsMerged",
                    "NotificationFailures",
                    "NotificationsUndeliverable",
                )
            ],
        )
        not_done = cloudwatch.GraphWidget(
            title="Not done: failed acts, unsent findings, unpublished warnings (runbook: docs/reliability.md)",
            width=12,
            left=[governor_metric(name, Duration.minutes(15), label) for name, label in NOT_DONE_METRICS],
        )
        parked = cloudwatch.GraphWidget(
            title="Events parked in a DLQ (Lambda on-failure and rejects; Spot's are time-bound)",
            width=12,
            left=[
                _search(
                    f"SEARCH('{{AWS/SQS,QueueName}} MetricName=\"NumberOfMessagesSent\" {stack_name} Dlq', 'Sum', 300)",
                    five,
                )
            ],
        )
        self.dashboard.add_widgets(*gpu)
        self.dashboard.add_widgets(verdicts, interruptions, errors)
        self.dashboard.add_widgets(dlq, notifications)
        self.dashboard.add_widgets(not_done, parked)
        self.url = (
            f"https://{stack.region}.console.aws.amazon.com/cloudwatch/home?region={stack.region}"
            f"#dashboards:name={self.name}"
        )
