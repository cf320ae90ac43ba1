"""Issue 50.1: the scheduled report says what the governor itself cost in its period and what it found, in every
rendering (the archived HTML and JSON, and the Slack digest as posted), through the real idle and report handlers on
moto, for the fleet the period's ledger holds."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from moto import mock_aws

from governor.adapters.aws import client
from governor.policy import resolve_policy
from governor_cli.testing.deployment import REGION, REPORTS_BUCKET, Deployment, image_id
from governor_cli.testing.events import scheduled
from governor_cli.testing.faults import fake_slack
from governor_cli.testing.idle_clock import clocked_idle
from tests.conftest import ROOT

FLEET = 6
IDLE = 2


def _launch(now: dt.datetime) -> None:
    ec2, cloudwatch = client("ec2", REGION), client("cloudwatch", REGION)
    tags = [
        {"Key": k, "Value": v} for k, v in {"owner": "ana@example.com", "team": "vision", "gpu-fleet": "true"}.items()
    ]
    found = ec2.run_instances(
        ImageId=image_id(),
        InstanceType="g5.xlarge",
        MinCount=FLEET,
        MaxCount=FLEET,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    for number, instance in enumerate(i["InstanceId"] for i in found["Instances"]):
        idle = number < IDLE
        values = {
            "nvidia_smi_utilization_gpu": 0.3 if idle else 80.0,
            "nvidia_smi_memory_used": 12_288.0,
            "nvidia_smi_power_draw": 25.0 if idle else 250.0,
        }
        for name, value in values.items():
            data = [
                {
                    "MetricName": name,
                    "Dimensions": [{"Name": "InstanceId", "Value": instance}],
                    "Timestamp": now + dt.timedelta(minutes=minute),
                    "Value": value,
                }
                for minute in range(-150, 60)
            ]
            for start in range(0, len(data), 1000):
                cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 1000])


@pytest.fixture
def posted() -> Any:
    """Slack's webhook answered in process, every posted message kept."""
    import slack_sdk.webhook.client as webhook_client

    sent: list[dict[str, Any]] = []
    with mock_aws(), fake_slack():
        answer = webhook_client.urlopen

        def record(request: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(json.loads(request.data))
            return answer(request, *args, **kwargs)

        webhook_client.urlopen = record  # type: ignore[assignment]
        client.cache_clear()
        yield sent
    client.cache_clear()


def test_the_report_says_what_the_governor_cost_this_period_and_what_it_found(posted: list[dict[str, Any]]) -> None:
    policy, _ = resolve_policy(str(ROOT / "governor.yaml"))
    deployment = Deployment(policy)
    try:
        now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(hours=3)
        _launch(now)
        clock = [now]
        with clocked_idle(lambda: clock[0]):
            for number in range(3):
                clock[0] = now + dt.timedelta(minutes=15 * number)
                deployment.invoke("idle", scheduled(time=clock[0]))
        decided = min(dt.datetime.fromisoformat(d["at"]) for d in deployment.ledger_decisions())
        day_after = decided.replace(hour=7, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)
        result = deployment.invoke("report", scheduled({"kind": "daily"}, time=day_after))
    finally:
        deployment.close()
    assert result["status"] == "sent"
    s3 = client("s3", REGION)
    prefix = f"reports/daily/{decided:%Y-%m-%d}/"
    archived = json.loads(s3.get_object(Bucket=REPORTS_BUCKET, Key=prefix + "report.json")["Body"].read())
    html = s3.get_object(Bucket=REPORTS_BUCKET, Key=prefix + "report.html")["Body"].read().decode()
    cost = archived["cost"]
    assert (cost.get("governor_cost_usd") or 0) > 0
    assert f"{FLEET:,} GPU instances swept 3 times" in cost.get("governor_cost_basis", "")
    said = f"The governor cost ${cost['governor_cost_usd']:,.2f} this period; it found ${cost['idle_cost_usd']:,.2f}"
    assert said in html
    digest = json.dumps(posted)
    assert said in digest
