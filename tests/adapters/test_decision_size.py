"""A routine idle decision fits one DynamoDB write unit (issue 50): a busy instance's decision, written every sweep for
every instance, is the ledger's bulk. Over 1,024 bytes it costs two write units on the table and two on the by-kind
index. Measured as DynamoDB counts it (``governor_cli.cost.meter.item_size``) on the item the idle handler wrote.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from governor.adapters.aws import client
from governor_cli.cost import measure
from governor_cli.cost.meter import WRITE_UNIT, Meter, item_size
from governor_cli.testing.deployment import REGION, image_id


def _busy(instance_type: str, now: dt.datetime) -> str:
    """One tagged instance of ``instance_type``, busy by every agent signal (utilisation, memory, power)."""
    ec2 = client("ec2", REGION)
    tags = [{"Key": k, "Value": v} for k, v in measure.FLEET_TAGS.items()]
    found = ec2.run_instances(
        ImageId=image_id(),
        InstanceType=instance_type,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    instance = str(found["Instances"][0]["InstanceId"])
    cloudwatch = client("cloudwatch", REGION)
    for name, value in measure.BUSY.items():
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": "InstanceId", "Value": instance}],
                "Timestamp": now + dt.timedelta(minutes=minute),
                "Value": value,
            }
            for minute in range(-measure.METRICS_BEFORE, 15)
        ]
        for start in range(0, len(data), 1000):
            cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 1000])
    return instance


def test_a_routine_busy_decision_of_a_multi_gpu_instance_fits_one_write_unit() -> None:
    meter = Meter()
    with measure.world(meter) as deployment:
        now = measure._start()
        instance = _busy("g5.12xlarge", now)  # four A10G GPUs, power judged against the measured idle draw
        measure.sweeps(meter, deployment, now, 1)
        items: list[dict[str, Any]] = client("dynamodb", REGION).scan(TableName=deployment.local.ledger_table)["Items"]

    (decision,) = [i for i in items if i.get("pk") == {"S": f"decision#{instance}"}]
    assert decision["rule"] == {"S": "idle.busy"}
    power = decision["evidence"]["M"]["power_limit"]["S"]
    assert power.startswith("NVIDIA A10G: idle 25.58 W, limit 300 W")  # still says what the power was judged against
    assert "a10g.xml" in power  # and cites the measurement, by its sample file
    assert item_size(decision) < WRITE_UNIT
