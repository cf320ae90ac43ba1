"""The idle sweep end to end on moto: EC2, CloudWatch and SSM, with the ledger and bus in memory."""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ec2 import Ec2Actions, Ec2Reader
from governor.adapters.ssm import SsmCommands
from governor.domain.fleet import Instance
from governor.idle.autoscaling import AutoScalingGroups
from governor.idle.digest import DIGEST_RULE
from governor.idle.domain import IDLE_ACTION_TAG, IDLE_SINCE_TAG, MARK_KIND, RESUMED
from governor.idle.handler import handle
from governor.idle.metrics import CloudWatchMetrics
from governor.idle.ports import Adapters
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing.events import scheduled
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink

# The simulated clock runs ahead of moto's launch times, however late in a parallel run these tests start
# (the module is imported at collection, its tests may run minutes later).
NOW = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(hours=2)
T0 = NOW + dt.timedelta(minutes=5)  # the first sweep, just after moto's launch time (launch grace is 0 here)
GPU_MEMORY_MB = 12_288.0  # what the CloudWatch agent publishes for 12 GiB in use: MB (nvidia-smi's MiB)


class Clock:
    """The function's clock. The scheduler delivers each event on time unless a test says otherwise."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


CLOCK = Clock()


def _event(at: dt.datetime, event_id: str, *, delivered: dt.datetime | None = None) -> dict[str, Any]:
    CLOCK.now = delivered or at
    return scheduled(event_id=event_id, time=at)


def _metrics(instance_id: str, util: float, minutes: int = 200, ahead: int = 60) -> None:
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    for name, value in (("nvidia_smi_utilization_gpu", util), ("nvidia_smi_memory_used", GPU_MEMORY_MB)):
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


FLEET_TAG = {"Key": "gpu-fleet", "Value": "true"}  # fleet.fleet_tags: the SendCommand grant requires it


def _launch(ec2: Any, instance_type: str, count: int = 1) -> list[str]:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"Key": "owner", "Value": "ana@example.com"}, {"Key": "team", "Value": "vision"}, FLEET_TAG]
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


def _aws(reader: Ec2Reader | None = None, metrics: CloudWatchMetrics | None = None) -> Adapters:
    return Adapters(
        reader or Ec2Reader("us-east-1", wildcard_type_filter=False),  # moto does not match wildcard filters
        Ec2Actions("us-east-1"),
        metrics or CloudWatchMetrics("us-east-1"),
        SsmCommands("us-east-1"),
        AutoScalingGroups("us-east-1"),
        CLOCK,
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
    assert any("would be stopped at" in t and "(report-only)" in t for t in titles)
    assert any("would be stopped now (report-only: not done)" in t for t in titles)


def test_rate_limit_defers_the_action_and_keeps_the_mark(fleet: Any) -> None:
    ec2, ids = fleet
    runtime = _runtime(max_actions_per_sweep=0)
    aws = _aws()
    handle(_event(T0, "sweep-1"), runtime, aws)
    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["deferred"] == 1 and second["outcomes"]["deferred"] == 1 and second["breaker"] == "closed"
    assert _state(ec2, ids["idle"]) == "running"
    assert not any(f.severity == "critical" for f in runtime.sink.findings)  # type: ignore[attr-defined]
    recorded = [d for _, d in runtime.ledger.decisions if d.resource == ids["idle"]]  # type: ignore[attr-defined]
    assert recorded[-1].rule == "idle.deferred" and "longest idle first" in recorded[-1].reasons[-1]
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


def _quiet_then(
    instance_id: str, busy_minutes_ago: int | None = None, *, memory: list[float] | None = None, ahead: int = 60
) -> None:
    """Idle samples around NOW (optionally busy from ``busy_minutes_ago`` on), memory in MB as the agent sends."""
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    data = []
    for m in range(-ahead, 201):
        at = NOW - dt.timedelta(minutes=m)
        util = 85.0 if busy_minutes_ago is not None and m <= busy_minutes_ago else 0.3
        mem = memory[m % len(memory)] if memory else GPU_MEMORY_MB
        for name, value in (("nvidia_smi_utilization_gpu", util), ("nvidia_smi_memory_used", mem)):
            data.append(
                {
                    "MetricName": name,
                    "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
                    "Timestamp": at,
                    "Value": value,
                }
            )
    for start in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 500])


def test_a_sweep_event_older_than_one_interval_is_skipped_and_acts_on_nothing(fleet: Any) -> None:
    """Lambda retries async events for up to 6 h and a DLQ replay has no limit: a late sweep must not act."""
    ec2, ids = fleet
    runtime = _runtime()
    aws = _aws()
    handle(_event(T0, "sweep-1"), runtime, aws)
    late = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2", delivered=T0 + dt.timedelta(hours=6)), runtime, aws)
    assert late["status"] == "skipped" and "330 min late" in late["reason"]
    assert _state(ec2, ids["idle"]) == "running"
    [skipped] = [d for _, d in runtime.ledger.decisions if d.rule == "idle.skipped"]  # type: ignore[attr-defined]
    assert skipped.evidence["status"] == "skipped" and skipped.verdict == "ignored"


def test_a_replayed_sweep_within_the_interval_judges_now_not_its_original_time(fleet: Any) -> None:
    """The event says T0+30 but arrives 10 min later, after the instance got busy: judged at arrival, kept."""
    ec2, ids = fleet
    runtime = _runtime()
    aws = _aws()
    handle(_event(T0, "sweep-1"), runtime, aws)
    arrival = T0 + dt.timedelta(minutes=40)
    _quiet_then(ids["idle"], busy_minutes_ago=int((NOW - (arrival - dt.timedelta(minutes=3))).total_seconds() // 60))
    result = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2", delivered=arrival), runtime, aws)
    assert result["judged_at"] == arrival.isoformat() and result["outcomes"].get("acted", 0) == 0
    assert _state(ec2, ids["idle"]) == "running"


class _JobStartsDuringTheSweep(CloudWatchMetrics):
    """A job starts on the instance right after the sweep's read: its first samples land before the action."""

    def __init__(self, instance_id: str) -> None:
        super().__init__("us-east-1")
        self.instance_id = instance_id
        self.reads = 0

    def fetch(self, instance_ids: Any, signals: Any, start: dt.datetime, end: dt.datetime) -> Any:
        self.reads += 1
        if self.reads == 3:  # sweep-1, sweep-2, then the re-read right before stopping
            boto3.client("cloudwatch", region_name="us-east-1").put_metric_data(
                Namespace="CWAgent",
                MetricData=[
                    {
                        "MetricName": "nvidia_smi_utilization_gpu",
                        "Timestamp": end - dt.timedelta(minutes=1),
                        "Dimensions": [{"Name": "InstanceId", "Value": self.instance_id}],
                        "Value": 93.0,
                    }
                ],
            )
        return super().fetch(instance_ids, signals, start, end)


def test_metrics_are_re_read_right_before_acting(fleet: Any) -> None:
    ec2, ids = fleet
    runtime = _runtime()
    metrics = _JobStartsDuringTheSweep(ids["idle"])
    aws = _aws(metrics=metrics)
    handle(_event(T0, "sweep-1"), runtime, aws)
    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    # Each sweep: one call for the window statistics, one for the minute points of those they do not prove busy; then
    # one batched re-read for the instances about to be acted on.
    assert metrics.reads == 3 and metrics.calls == 5
    assert second["done"][ids["idle"]][0].startswith("skipped: metrics re-read before acting say busy")
    assert _state(ec2, ids["idle"]) == "running"


def test_a_stale_newest_sample_makes_the_instance_unmonitored(fleet: Any) -> None:
    """Agent samples stopped arriving 10 minutes ago (ingestion delay or a new job not yet visible)."""
    _ec2, ids = fleet
    runtime = _runtime()
    result = handle(_event(NOW + dt.timedelta(minutes=70), "late-data"), runtime, _aws())
    # metrics were written up to NOW + 60 min: the newest sample is 10 min old, over max_sample_age_minutes 5
    assert result["outcomes"] == {"unmonitored": 2, "busy": 1}  # activity that did arrive still counts
    recorded = [d for _, d in runtime.ledger.decisions if d.resource == ids["idle"]]  # type: ignore[attr-defined]
    assert "min old" in recorded[-1].reasons[-1]


def test_gpu_memory_is_read_in_mb_through_the_handler(fleet: Any) -> None:
    """A 2 GB <-> 40 GB swing, published in MB as the agent does, is activity: the instance is not idle."""
    _ec2, ids = fleet
    _quiet_then(ids["idle"], memory=[2_048.0, 40_960.0])
    result = handle(_event(T0, "sweep-1"), _runtime(), _aws())
    assert result["outcomes"].get("warned", 0) == 0 and result["outcomes"]["busy"] == 2


FLEET_GROUP_TAG = {"Key": "gpu-fleet", "Value": "true", "PropagateAtLaunch": True}


def _asg(min_size: int, desired: int, tags: list[dict[str, Any]] | None = None) -> tuple[Any, list[str]]:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    autoscaling = boto3.client("autoscaling", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName="gpu", LaunchTemplateData={"ImageId": image, "InstanceType": "g5.xlarge"}
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="train-pool",
        LaunchTemplate={"LaunchTemplateName": "gpu", "Version": "$Latest"},
        MinSize=min_size,
        MaxSize=10,
        DesiredCapacity=desired,
        AvailabilityZones=["us-east-1a"],
        Tags=tags or [],
    )
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["train-pool"])["AutoScalingGroups"][0]
    members = sorted(i["InstanceId"] for i in group["Instances"])
    for member in members:
        _quiet_then(member)
    return autoscaling, members


@mock_aws
def test_an_auto_scaling_member_is_reclaimed_through_its_group_within_the_minimum() -> None:
    autoscaling, members = _asg(min_size=1, desired=2, tags=[FLEET_GROUP_TAG])
    ec2 = boto3.client("ec2", region_name="us-east-1")
    assert all(_tags(ec2, m)["aws:autoscaling:groupName"] == "train-pool" for m in members)
    runtime = _runtime(max_actions_per_sweep=5)
    aws = _aws()
    handle(_event(T0, "sweep-1"), runtime, aws)
    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    done = {i: second["done"][i][0] for i in members}
    reclaimed = [i for i, text in done.items() if text.startswith("terminated through Auto Scaling group train-pool")]
    refused = [i for i, text in done.items() if text.startswith("reported only") and "at its minimum" in text]
    assert len(reclaimed) == 1 and len(refused) == 1, done
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["train-pool"])["AutoScalingGroups"][0]
    assert group["DesiredCapacity"] == 1  # decremented, so the group does not launch a replacement
    assert _state(ec2, refused[0]) == "running"
    titles = [f.title for f in runtime.sink.findings]  # type: ignore[attr-defined]
    assert any("reported, not reclaimed" in t for t in titles)


@mock_aws
def test_a_group_without_the_fleet_tags_is_never_scaled_in() -> None:
    """Issue 33: the idle role could terminate members of any Auto Scaling group; now only the fleet's (its tags, in
    code and in the IAM condition) lose members, the others are reported."""
    autoscaling, members = _asg(min_size=0, desired=2)
    runtime = _runtime(max_actions_per_sweep=5)
    aws = _aws()
    handle(_event(T0, "sweep-1"), runtime, aws)
    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert all("lacks fleet.fleet_tags" in second["done"][m][0] for m in members)
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["train-pool"])["AutoScalingGroups"][0]
    assert group["DesiredCapacity"] == 2


@mock_aws
def test_an_eks_node_is_reported_only() -> None:
    _, members = _asg(
        min_size=0, desired=1, tags=[{"Key": "eks:cluster-name", "Value": "ml", "PropagateAtLaunch": True}]
    )
    ec2 = boto3.client("ec2", region_name="us-east-1")
    runtime = _runtime()
    aws = _aws()
    handle(_event(T0, "sweep-1"), runtime, aws)
    second = handle(_event(T0 + dt.timedelta(minutes=30), "sweep-2"), runtime, aws)
    assert second["outcomes"] == {"reported": 1} and not second["done"]
    assert _state(ec2, members[0]) == "running"
    finding = runtime.sink.findings[-1]  # type: ignore[attr-defined]
    assert "Kubernetes node" in finding.title and "eks:cluster-name" in finding.title


def turned_idle_together(ec2: Any, count: int = 6) -> list[str]:
    """``count`` GPU instances busy until 20 minutes before T0, then all reading 0% from the same minute on."""
    ids = _launch(ec2, "g5.xlarge", count)
    for instance_id in ids:
        _quiet_then(instance_id, ahead=200)  # quiet far ahead; the minutes before T0 are rewritten below
    cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
    for instance_id in ids:  # busy until 20 minutes before T0, then every GPU reads 0% in the same minute
        data = [
            {
                "MetricName": "nvidia_smi_utilization_gpu",
                "Dimensions": [{"Name": "InstanceId", "Value": instance_id}],
                "Timestamp": T0 - dt.timedelta(minutes=m),
                "Value": 0.3 if m < 20 else 88.0,
            }
            for m in range(0, 200)
        ]
        for start in range(0, len(data), 500):
            cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 500])
    return ids


@mock_aws
def test_the_breaker_holds_a_fleet_that_turned_idle_together_with_one_critical_finding() -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ids = turned_idle_together(ec2)
    for enforce in (True, False):
        runtime = _runtime(enforce=enforce, max_fleet_percent=20)
        aws = _aws()
        results = [
            handle(_event(T0 + dt.timedelta(minutes=15 * k), f"s-{enforce}-{k}"), runtime, aws) for k in range(12)
        ]
        assert all(_state(ec2, i) == "running" for i in ids)
        critical = [f for f in runtime.sink.findings if f.severity == "critical"]  # type: ignore[attr-defined]
        assert len(critical) == 1 and critical[0].rule == "idle.circuit-breaker"  # once per held set, not per sweep
        assert results[-1]["breaker"] == "open" and results[-1]["outcomes"] == {"held": 6}
        assert not [f for f in runtime.sink.findings if f.rule == "idle.warned"]  # type: ignore[attr-defined]


def test_one_owners_idle_instances_of_one_sweep_are_warned_in_one_digest_dearest_first() -> None:
    """Issue 37: one message per owner per sweep. Each warning keeps its own finding (and episode id); the digest
    lists them, the dearest first, and an instance counts as warned once the digest is on the bus."""
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        cheap = _launch(ec2, "g5.xlarge")[0]
        dear = _launch(ec2, "g5.12xlarge")[0]
        _metrics(cheap, 0.2)
        _metrics(dear, 0.2)
        runtime = _runtime(enforce=False)
        result = handle(_event(T0, "sweep-1"), runtime, _aws())
        assert result["outcomes"] == {"warned": 2}
        findings = runtime.sink.findings  # type: ignore[attr-defined]
        digests = [f for f in findings if f.rule == DIGEST_RULE]
        warnings = [f for f in findings if f.rule == "idle.warned"]
        assert len(digests) == 1 and len(warnings) == 2
        assert [m.resource for m in digests[0].members] == [dear, cheap]
        assert digests[0].owner == "ana@example.com"
        assert {w.digested_in for w in warnings} == {digests[0].id}
        for instance in (cheap, dear):
            assert runtime.ledger.get_item(MARK_KIND, instance)["warned_at"]


def test_a_warned_instance_that_turns_busy_again_withdraws_its_warning_once_per_episode(fleet: Any) -> None:
    """Issue 37: one message per episode (warned -> busy again). The sweep that finds a warned instance at work
    publishes one info finding, rule idle.resumed, naming the signal that showed the work; the sweeps after it (the
    mark is cleared) and the instance that was never warned publish none."""
    ec2, ids = fleet
    runtime = _runtime()
    aws = _aws()
    handle(_event(T0, "sweep-1"), runtime, aws)
    assert runtime.ledger.get_item(MARK_KIND, ids["idle"])["warned_at"]
    _metrics(ids["idle"], 80.0, minutes=-10, ahead=40)  # a job starts 10 min after NOW (the warning was at NOW+5)
    second = handle(_event(T0 + dt.timedelta(minutes=15), "sweep-2"), runtime, aws)
    assert second["outcomes"] == {"busy": 2, "unmonitored": 1}
    assert _state(ec2, ids["idle"]) == "running" and IDLE_SINCE_TAG not in _tags(ec2, ids["idle"])
    handle(_event(T0 + dt.timedelta(minutes=30), "sweep-3"), runtime, aws)  # still busy: nothing more to say
    findings = runtime.sink.findings  # type: ignore[attr-defined]
    withdrawn = [f for f in findings if f.rule == RESUMED]
    assert len(withdrawn) == 1
    (finding,) = withdrawn
    assert finding.resource == ids["idle"] and finding.severity == "info" and finding.owner == "ana@example.com"
    assert "busy again: idle warning withdrawn" in finding.title
    assert "GPU utilisation reached 80.0%" in finding.detail and "withdrawn: nothing will be done" in finding.detail
    recorded = [(e, d) for e, d in runtime.ledger.decisions if d.rule == RESUMED]  # type: ignore[attr-defined]
    # recorded by sweep 2 only (as judged, then with what was done: the idle-since tag removed)
    assert {(e, d.resource, d.evidence["status"]) for e, d in recorded} == {("sweep-2", ids["idle"], "busy")}
    recorded = [d for _, d in recorded]
    assert recorded[0].evidence["warned_at"]
    assert runtime.ledger.get_item(MARK_KIND, ids["idle"])["idle_since"] is None
