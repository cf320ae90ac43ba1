"""The list prices the governor's footprint is priced at: us-east-1, USD, as AWS's pricing pages publish them.

Each price names its page. Free tiers are left out (they are shared with everything else in the account) except
where the governor's use sits inside a tier that is per account and region or per service: the first copy of
CloudTrail management events, the first 10,000 Security Hub finding ingestions a month and EventBridge Scheduler's
14 million free invocations a month. Update ``AS_OF`` with the figures.
"""

from __future__ import annotations

from dataclasses import dataclass

REGION = "us-east-1"
AS_OF = "2026-12-06"
GB = 1024**3
TB = 1024**4
MB = 1024**2

LAMBDA = "https://aws.amazon.com/lambda/pricing/"
CLOUDWATCH = "https://aws.amazon.com/cloudwatch/pricing/"
DYNAMODB = "https://aws.amazon.com/dynamodb/pricing/on-demand/"
EVENTBRIDGE = "https://aws.amazon.com/eventbridge/pricing/"
SQS = "https://aws.amazon.com/sqs/pricing/"
KMS = "https://aws.amazon.com/kms/pricing/"
ATHENA = "https://aws.amazon.com/athena/pricing/"
S3 = "https://aws.amazon.com/s3/pricing/"
CLOUDTRAIL = "https://aws.amazon.com/cloudtrail/pricing/"
SECURITY_HUB = "https://aws.amazon.com/security-hub/pricing/"
SECRETS = "https://aws.amazon.com/secrets-manager/pricing/"
XRAY = "https://aws.amazon.com/xray/pricing/"


@dataclass(frozen=True)
class Price:
    """``usd`` for every ``per`` of ``unit`` (storage and scans are priced per GB or TB: their lines count GB or
    TB); ``text`` is how a line shows it."""

    usd: float
    per: float
    unit: str
    source: str

    def cost(self, quantity: float) -> float:
        return quantity / self.per * self.usd

    @property
    def text(self) -> str:
        per = "" if self.per == 1 else f"{_count(self.per)} "
        whole, _, cents = f"{self.usd:.10f}".rstrip("0").partition(".")
        return f"${whole}.{cents.ljust(2, '0')} per {per}{self.unit}"


def _count(value: float) -> str:
    for size, word in ((1_000_000, "million"), (1_000, "thousand")):
        if value >= size and value % size == 0:
            amount = int(value // size)
            return f"{amount:,} {word}" if amount > 1 else f"{word}"
    return f"{value:,.0f}"


PRICES: dict[str, Price] = {
    "lambda_requests": Price(0.20, 1_000_000, "requests", LAMBDA),
    "lambda_gb_seconds": Price(0.0000133334, 1, "GB-second (arm64, first 7.5 billion)", LAMBDA),
    "xray_traces": Price(5.00, 1_000_000, "traces recorded", XRAY),
    "getmetricdata": Price(0.01, 1_000, "metrics requested (GetMetricData)", CLOUDWATCH),
    "cloudwatch_requests": Price(0.01, 1_000, "requests (PutMetricData and other API)", CLOUDWATCH),
    "alarms": Price(0.10, 1, "standard-resolution alarm metric a month", CLOUDWATCH),
    "dashboards": Price(3.00, 1, "dashboard a month", CLOUDWATCH),
    "logs_ingested": Price(0.50, 1, "GB ingested (Standard log class)", CLOUDWATCH),
    "logs_stored": Price(0.03, 1, "GB stored a month", CLOUDWATCH),
    "dynamodb_wru": Price(0.625, 1_000_000, "write request units (on-demand)", DYNAMODB),
    "dynamodb_rru": Price(0.125, 1_000_000, "read request units (on-demand)", DYNAMODB),
    "dynamodb_storage": Price(0.25, 1, "GB stored a month (Standard table class)", DYNAMODB),
    "dynamodb_pitr": Price(0.20, 1, "GB of table a month (point-in-time recovery)", DYNAMODB),
    "events": Price(1.00, 1_000_000, "custom events published (64 KB chunks)", EVENTBRIDGE),
    "events_archived": Price(0.10, 1, "GB archived (events processed)", EVENTBRIDGE),
    "events_archive_stored": Price(0.023, 1, "GB of archive stored a month", EVENTBRIDGE),
    "scheduler": Price(1.00, 1_000_000, "scheduled invocations beyond 14 million a month", EVENTBRIDGE),
    "sqs": Price(0.40, 1_000_000, "requests (standard queues)", SQS),
    "kms_keys": Price(1.00, 1, "customer managed key a month", KMS),
    "kms_requests": Price(0.03, 10_000, "requests", KMS),
    "athena": Price(5.00, 1, "TB scanned (10 MB minimum a query)", ATHENA),
    "s3_storage": Price(0.023, 1, "GB stored a month (S3 Standard)", S3),
    "s3_put": Price(0.005, 1_000, "PUT requests", S3),
    "s3_get": Price(0.0004, 1_000, "GET requests", S3),
    "cloudtrail_copy": Price(2.00, 100_000, "management events (a copy beyond the first)", CLOUDTRAIL),
    "securityhub_findings": Price(0.00003, 1, "finding ingested beyond 10,000 an account and region", SECURITY_HUB),
    "secrets": Price(0.40, 1, "secret a month", SECRETS),
    "secrets_requests": Price(0.05, 10_000, "API calls", SECRETS),
}

#: CloudWatch custom metrics: metric-months in tiers (first 10,000 at $0.30, next 240,000 at $0.10, next 750,000 at
#: $0.05, beyond 1,000,000 at $0.02), prorated by the hour a metric is published.
CUSTOM_METRIC_TIERS: tuple[tuple[float, float], ...] = (
    (10_000, 0.30),
    (240_000, 0.10),
    (750_000, 0.05),
    (float("inf"), 0.02),
)
CUSTOM_METRIC_TEXT = "$0.30 per metric a month for the first 10,000, then $0.10, $0.05 beyond 250,000, $0.02 beyond 1M"
SCHEDULER_FREE = 14_000_000
SECURITY_HUB_FREE = 10_000
ATHENA_MINIMUM_BYTES = 10 * MB


def custom_metrics_cost(metrics: float) -> float:
    """Monthly cost of ``metrics`` custom metrics published all month (one account's tiers)."""
    cost, left = 0.0, metrics
    for size, usd in CUSTOM_METRIC_TIERS:
        taken = min(left, size)
        cost += taken * usd
        left -= taken
        if left <= 0:
            break
    return cost
