"""The idle sweep end to end on moto: EC2, CloudWatch and SSM, with the ledger and bus in memory."""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.cloudwatch import CloudWatchMetrics
from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.ssm import SsmCommands
from governor.domain.fleet import Instance
from governor.domain.idle import IDLE_ACTION_TAG, IDLE_SINCE_TAG, MARK_KIND
from governor.domain.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from governor.handlers._runtime import Runtime
from governor.handlers.idle import IdleAws, handle
from governor.policy import parse_policy

# The simulated clock runs ahead of moto's launch times, however late in a parallel run these tests start
# (the module is imported at collection, its tests may run minutes later).
NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(hours=2)
T0 = NOW + dt.timedelta(minutes=5)  # the first sweep, just after moto's launch time (launch grace is 0 here)
GIB = 1024**3


def _event(at: dt.datetime, event_id: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": event_id,
        "detail-type": "Scheduled Event",
        "source": "aws.scheduler",
        "account": "123456789012",
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [],
        "detail": {},
    }


def _metrics(instance_id: str, util: float, minutes: int = 200, ahead: int = 60) -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    for name, value in (("nvidia_smi_utilization_gpu", util), ("nvidia_smi_memory_used", 12 * GIB)):
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
                "Timestamp": NOW - dt.timedelta(minutes=m),
                "Value": value,
            }
            for m in range(-ahead, minutes + 1)
        ]
        for start in range(0, len(data), 500):
            cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 500])


def _launch(ec2: Any, instance_type: str, count: int = 1) -> list[str]:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"Key": "owner", "Value": "ana@example.com"}, {"Key": "team", "Value": "vision"}]
    found = ec2.run_instances(
        ImageId=image,
        InstanceType=instance_type,
        MinCount=count,
        MaxCount=count,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    return [i["InstanceId"] for i in found["Instances"]]


def _tags(ec2: Any, instance_id: str) -> dict[str, str]:
    found = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in found.get("Tags", [])}


def _state(ec2: Any, instance_id: str) -> str:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"]


def _runtime(**idle: Any) -> Runtime:
    settings = {"enforce": True, "launch_grace_minutes": 0, "max_fleet_percent": 100, **idle}
    return Runtime(
        policy=parse_policy({"idle": settings}),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region="us-east-1",
    )


def _aws(reader: Ec2Reader | None = None) -> IdleAws:
    return IdleAws(
        reader or Ec2Reader("us-east-1", wildcard_type_filter=False),  # moto does not match wildcard filters
        Ec2Actions("us-east-1"),
        CloudWatchMetrics("us-east-1"),
        SsmCommands("us-east-1"),
    )


@pytest.fixture
def fleet() -> Any:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        idle, busy, dark = _launch(ec2, "g5.xlarge", 3)
        cpu_box = _launch(ec2, "m5.large")[0]
        _metrics(idle, 0.3)
        _metrics(busy, 75.0)
        _metrics(cpu_box, 0.0)
        yield ec2, {"idle": idle, "busy": busy, "dark": dark, "cpu": cpu_box}


def test_warns_then_stops_the_idle_instance_and_leaves_the_others(fleet: Any) -> None:
    ec2, ids = fleet
    runtime = _runtime()
    aws = _aws()
    first = handle(_event(T0, "sweep-1"), runtime, aws)
    assert first["instances"] == 3  # the m5 is not part of the GPU fleet
    assert first["outcomes"] == {"warned": 1, "busy": 1, "unmonitored": 1}
    assert IDLE_SINCE_TAG in _tags(ec2, ids["idle"])
    warning = runtime.sink.findings[0]  # type: ignore[attr-defined]
    assert warning.resource == ids["idle"] and warning.owner == "ana@example.com" and warning.severity == "warning"
    assert "will be stopped" in warning.title
    verdicts = {d.resource: d.evidence["status"] for _, d in runtime.ledger.decisions}  # type: ignore[attr-defined]
    assert verdicts == {ids["idle"]: "warned", ids["busy"]: "busy", ids["dark"]: "unmonitored"}
    assert runtime.ledger.get_item(MARK_KIND, ids["idle"])["idle_since"]

    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["outcomes"]["acted"] == 1 and "stopped" in second["done"][ids["idle"]]
    assert _state(ec2, ids["idle"]) in ("stopping", "stopped")
    assert _state(ec2, ids["busy"]) == "running" and _state(ec2, ids["dark"]) == "running"
    tags = _tags(ec2, ids["idle"])
    assert IDLE_SINCE_TAG not in tags and tags[IDLE_ACTION_TAG].startswith("stop@")
    assert runtime.ledger.get_item(MARK_KIND, ids["idle"])["idle_since"] is None
    assert "stopped" in runtime.sink.findings[-1].title  # type: ignore[attr-defined]
    recorded = [d for _, d in runtime.ledger.decisions if d.resource == ids["idle"]]  # type: ignore[attr-defined]
    assert "stopped" in recorded[-1].evidence["done"]  # recorded before and after acting


def test_report_only_warns_and_records_but_changes_nothing(fleet: Any) -> None:
    ec2, ids = fleet
    runtime = _runtime(enforce=False)
    aws = _aws()
    handle(_event(T0, "sweep-1"), runtime, aws)
    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["outcomes"]["acted"] == 1 and not second["done"]
    assert _state(ec2, ids["idle"]) == "running" and IDLE_SINCE_TAG not in _tags(ec2, ids["idle"])
    titles = [f.title for f in runtime.sink.findings]  # type: ignore[attr-defined]
    assert any("will be stopped" in t for t in titles) and any(
        "would be stopped (report-only: not done)" in t for t in titles
    )


def test_blast_radius_holds_every_action_and_raises_a_critical_finding(fleet: Any) -> None:
    ec2, ids = fleet
    runtime = _runtime(max_actions_per_sweep=0)
    aws = _aws()
    handle(_event(T0, "sweep-1"), runtime, aws)
    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["held_back"] == 1 and second["outcomes"]["held"] == 1
    assert _state(ec2, ids["idle"]) == "running"
    alarm = runtime.sink.findings[-1]  # type: ignore[attr-defined]
    assert alarm.severity == "critical" and alarm.rule == "idle.blast-radius"
    assert runtime.ledger.get_item(MARK_KIND, ids["idle"])["idle_since"]  # the mark survives for the next sweep


def test_checkpoint_command_goes_over_ssm_before_the_stop(fleet: Any) -> None:
    ec2, ids = fleet
    runtime = _runtime(checkpoint_command="systemctl kill -s USR1 train")
    aws = _aws()
    handle(_event(T0, "sweep-1"), runtime, aws)
    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["outcomes"]["checkpoint"] == 1 and _state(ec2, ids["idle"]) == "running"
    mark = runtime.ledger.get_item(MARK_KIND, ids["idle"])
    assert mark["checkpoint_command_id"] and mark["checkpoint_status"] == "Pending"
    third = handle(_event(T0 + dt.timedelta(minutes=45), "sweep-3"), runtime, aws)
    assert third["outcomes"]["acted"] == 1 and _state(ec2, ids["idle"]) in ("stopping", "stopped")


class _ExemptOnReread(Ec2Reader):
    """The owner tags the instance exempt between the listing and the action."""

    def instance(self, instance_id: str) -> Instance | None:
        found = super().instance(instance_id)
        if found is None:
            return None
        return Instance(**{**found.__dict__, "tags": {**found.tags, "governor:exempt": "true"}})


def test_the_instance_is_reread_before_acting(fleet: Any) -> None:
    ec2, ids = fleet
    runtime = _runtime()
    aws = _aws(_ExemptOnReread("us-east-1", wildcard_type_filter=False))
    handle(_event(T0, "sweep-1"), runtime, aws)
    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["done"][ids["idle"]][0].startswith("skipped") and _state(ec2, ids["idle"]) == "running"


def test_an_event_that_is_not_the_schedule_goes_to_the_dlq(fleet: Any) -> None:
    runtime = _runtime()
    event = {**_event(NOW, "x"), "detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2"}
    result = handle(event, runtime, _aws())
    assert result["status"] == "rejected" and "schedule" in result["reason"]
    assert runtime.dead_letters.messages and not runtime.ledger.decisions  # type: ignore[attr-defined]


class _FailingActions(Ec2Actions):
    """EC2 refuses to stop one instance (e.g. a Spot instance without a persistent request)."""

    def __init__(self, region: str, refuse: str) -> None:
        super().__init__(region)
        self.refuse = refuse

    def stop(self, instance_id: str) -> None:
        if instance_id == self.refuse:
            raise RuntimeError("UnsupportedOperation: this instance cannot be stopped")
        super().stop(instance_id)


def test_a_failed_action_is_recorded_and_retried_next_sweep_without_stopping_the_sweep(fleet: Any) -> None:
    ec2, ids = fleet
    runtime = _runtime()
    aws = _aws()
    aws.actions = _FailingActions("us-east-1", refuse=ids["idle"])
    handle(_event(T0, "sweep-1"), runtime, aws)
    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["done"][ids["idle"]][0].startswith("failed: RuntimeError")
    assert _state(ec2, ids["idle"]) == "running"
    assert runtime.ledger.get_item(MARK_KIND, ids["idle"])["idle_since"]  # kept: the next sweep tries again
    recorded = [d for _, d in runtime.ledger.decisions if d.resource == ids["idle"]]  # type: ignore[attr-defined]
    assert recorded[-1].evidence["done"][0].startswith("failed")
    aws.actions = Ec2Actions("us-east-1")
    third = handle(_event(T0 + dt.timedelta(minutes=45), "sweep-3"), runtime, aws)
    assert "stopped" in third["done"][ids["idle"]]
