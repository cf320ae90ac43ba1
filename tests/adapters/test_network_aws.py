"""The network function on moto: only offending rules are revoked, public addresses removed, drift swept."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ec2 import Ec2Reader
from governor.network.addresses import PublicAddresses
from governor.network.handler import Adapters, SweepIncompleteError, handle
from governor.network.security_groups import SecurityGroups
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing import events
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink

REGION = "us-east-1"
IMAGE = "ami-12c6146b"  # moto accepts any AMI id; listing its catalogue costs seconds


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def runtime(**network: Any) -> Runtime:
    """These tests judge rules in groups with no GPU instance attached, so they opt in to ``scope: all``."""
    return Runtime(
        policy=parse_policy({"network": {"scope": "all", **network}}),
        ledger=MemoryLedger(),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region=REGION,
    )


def aws() -> Adapters:
    return Adapters(SecurityGroups(REGION), PublicAddresses(REGION), Ec2Reader(REGION, wildcard_type_filter=False))


def cloudtrail(
    name: str, request: dict[str, Any], response: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    record = {
        "eventTime": "2026-11-30T09:00:00Z",
        "eventSource": "ec2.amazonaws.com",
        "eventName": name,
        "awsRegion": REGION,
        "requestParameters": request,
        "responseElements": response,
        **extra,
    }
    return events.cloudtrail(record, account="123456789012")


def scheduled() -> dict[str, Any]:
    return events.scheduled(time="2026-11-30T03:00:00Z", region=REGION)


def new_group(ec2: Any, name: str = "training", tags: dict[str, str] | None = None) -> tuple[str, str]:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    spec = [{"ResourceType": "security-group", "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()]}]
    group = ec2.create_security_group(
        GroupName=name, Description="gpu nodes", VpcId=vpc, **({"TagSpecifications": spec} if tags else {})
    )["GroupId"]
    return vpc, group


def live_rules(ec2: Any, group: str) -> set[tuple[str, int, str]]:
    rules = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])["SecurityGroupRules"]
    return {
        (
            r["IpProtocol"],
            r["FromPort"],
            r.get("CidrIpv4") or r.get("CidrIpv6") or r.get("ReferencedGroupInfo", {}).get("GroupId"),
        )
        for r in rules
        if not r["IsEgress"]
    }


MIXED = [
    {
        "IpProtocol": "tcp",
        "FromPort": 22,
        "ToPort": 22,
        "IpRanges": [{"CidrIp": "0.0.0.0/0"}, {"CidrIp": "10.0.0.0/8"}],
    },
    {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "Ipv6Ranges": [{"CidrIpv6": "::/0"}]},
]


def authorize(ec2: Any, group: str) -> dict[str, Any]:
    """Add MIXED (plus the self-referencing training rule) and describe it the way CloudTrail would, with rule ids."""
    permissions = [
        *MIXED,
        {"IpProtocol": "tcp", "FromPort": 2222, "ToPort": 2223, "UserIdGroupPairs": [{"GroupId": group}]},
    ]
    ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=permissions)
    described = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])[
        "SecurityGroupRules"
    ]
    items = [
        {
            "securityGroupRuleId": r["SecurityGroupRuleId"],
            "groupId": group,
            "isEgress": False,
            "ipProtocol": r["IpProtocol"],
            "fromPort": r["FromPort"],
            "toPort": r["ToPort"],
            **({"cidrIpv4": r["CidrIpv4"]} if "CidrIpv4" in r else {}),
            **({"cidrIpv6": r["CidrIpv6"]} if "CidrIpv6" in r else {}),
            **(
                {"referencedGroupInfo": {"groupId": r["ReferencedGroupInfo"]["GroupId"]}}
                if "ReferencedGroupInfo" in r
                else {}
            ),
        }
        for r in described
        if not r["IsEgress"]
    ]
    nested = {
        "items": [
            {
                "ipProtocol": "tcp",
                "fromPort": 22,
                "toPort": 22,
                "ipRanges": {"items": [{"cidrIp": "0.0.0.0/0"}, {"cidrIp": "10.0.0.0/8"}]},
            },
            {"ipProtocol": "tcp", "fromPort": 443, "toPort": 443, "ipv6Ranges": {"items": [{"cidrIpv6": "::/0"}]}},
            {"ipProtocol": "tcp", "fromPort": 2222, "toPort": 2223, "groups": {"items": [{"groupId": group}]}},
        ]
    }
    return cloudtrail(
        "AuthorizeSecurityGroupIngress",
        {"groupId": group, "ipPermissions": nested},
        {"_return": True, "securityGroupRuleSet": {"items": items}},
    )


# --- the adapter ------------------------------------------------------------------------------------------------------


def test_adapter_reads_rules_with_ids_and_revokes_one_by_id(ec2: Any) -> None:
    _, group = new_group(ec2, tags={"team": "vision"})
    ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=MIXED)
    groups = SecurityGroups(REGION)
    state = groups.group(group)
    assert state is not None and state.tags == {"team": "vision"} and len(state.rules) == 3
    world = next(r for r in state.rules if r.source.value == "0.0.0.0/0")
    assert world.rule_id and world.rule_id.startswith("sgr-")
    assert groups.revoke(group, world.rule_id) is True
    assert live_rules(ec2, group) == {("tcp", 22, "10.0.0.0/8"), ("tcp", 443, "::/0")}
    assert groups.revoke(group, world.rule_id) is False  # already gone: nothing left to do
    assert groups.group("sg-0123456789abcdef0") is None
    assert {g.group_id for g in groups.all_groups()} >= {group}


# --- events -----------------------------------------------------------------------------------------------------------


def test_enforcing_revokes_only_the_offending_rules_and_says_so(ec2: Any) -> None:
    _, group = new_group(ec2, tags={"team": "vision", "owner": "alice"})
    event = authorize(ec2, group)
    rt = runtime(enforce=True)
    result = handle(event, rt, aws())
    assert live_rules(ec2, group) == {("tcp", 22, "10.0.0.0/8"), ("tcp", 2222, group)}
    ((event_id, decision), _after) = rt.ledger.decisions  # type: ignore[attr-defined]
    assert event_id == event["id"] and decision.verdict == "act" and len(decision.enforced_actions()) == 3
    (finding,) = rt.sink.findings  # type: ignore[attr-defined]
    assert finding.enforced and finding.severity == "critical" and finding.resource == group
    assert (finding.team, finding.owner) == ("vision", "alice")  # routed to the group's team
    assert finding.detail.count("revoked sgr-") == 2 and "::/0" in finding.detail
    assert len(result["decisions"][0]["done"]) == 2


def test_report_only_changes_nothing_but_reports(ec2: Any) -> None:
    _, group = new_group(ec2)
    event = authorize(ec2, group)
    rt = runtime()
    handle(event, rt, aws())
    assert ("tcp", 22, "0.0.0.0/0") in live_rules(ec2, group)
    (finding,) = rt.sink.findings  # type: ignore[attr-defined]
    assert not finding.enforced and "done:" not in finding.detail
    assert len(rt.ledger.decisions) == 1  # type: ignore[attr-defined]


def test_legacy_flat_call_without_rule_ids_is_found_by_re_reading_the_group(ec2: Any) -> None:
    _, group = new_group(ec2)
    ec2.authorize_security_group_ingress(
        GroupId=group, IpProtocol="tcp", FromPort=3389, ToPort=3389, CidrIp="0.0.0.0/0"
    )
    ec2.authorize_security_group_ingress(
        GroupId=group, IpProtocol="tcp", FromPort=3389, ToPort=3389, CidrIp="10.1.0.0/16"
    )
    event = cloudtrail(
        "AuthorizeSecurityGroupIngress",
        {
            "groupId": group,
            "ipPermissions": {},
            "ipProtocol": "tcp",
            "fromPort": 3389,
            "toPort": 3389,
            "cidrIp": "0.0.0.0/0",
        },
        {"_return": True},
    )
    handle(event, runtime(enforce=True), aws())
    assert live_rules(ec2, group) == {("tcp", 3389, "10.1.0.0/16")}


def test_modify_security_group_rules_to_the_world_is_revoked(ec2: Any) -> None:
    _, group = new_group(ec2)
    ec2.authorize_security_group_ingress(
        GroupId=group,
        IpPermissions=[{"IpProtocol": "tcp", "FromPort": 8888, "ToPort": 8888, "IpRanges": [{"CidrIp": "10.0.0.0/8"}]}],
    )
    (target,) = [
        r["SecurityGroupRuleId"]
        for r in ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])[
            "SecurityGroupRules"
        ]
        if not r["IsEgress"]
    ]
    change = {"IpProtocol": "tcp", "FromPort": 8888, "ToPort": 8888, "CidrIpv4": "0.0.0.0/0"}
    ec2.modify_security_group_rules(
        GroupId=group, SecurityGroupRules=[{"SecurityGroupRuleId": target, "SecurityGroupRule": change}]
    )
    event = cloudtrail(
        "ModifySecurityGroupRules",
        {
            "ModifySecurityGroupRulesRequest": {
                "GroupId": group,
                "SecurityGroupRule": {"SecurityGroupRuleId": target, "SecurityGroupRule": change},
            }
        },
        {"ModifySecurityGroupRulesResponse": {"return": True}},
    )
    result = handle(event, runtime(enforce=True), aws())
    assert live_rules(ec2, group) == set()
    assert result["decisions"][0]["done"] == [f"revoked {target} (tcp 8888 from 0.0.0.0/0)"]


def test_protected_group_is_reported_and_never_changed(ec2: Any) -> None:
    _, group = new_group(ec2, tags={"platform": "eks"})
    event = authorize(ec2, group)
    rt = runtime(enforce=True, protected_groups={"tags": {"platform": "*"}})
    handle(event, rt, aws())
    assert ("tcp", 22, "0.0.0.0/0") in live_rules(ec2, group)
    (finding,) = rt.sink.findings  # type: ignore[attr-defined]
    assert "Protected" in finding.title and not finding.enforced


def test_failed_call_is_ignored_without_touching_aws(ec2: Any) -> None:
    _, group = new_group(ec2)
    ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=MIXED)
    event = cloudtrail(
        "AuthorizeSecurityGroupIngress",
        {"groupId": group, "ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIp": "0.0.0.0/0"},
        None,
        errorCode="Client.InvalidPermission.Duplicate",
        errorMessage="the specified rule already exists",
    )
    rt, adapters = runtime(enforce=True), aws()
    handle(event, rt, adapters)
    assert adapters.groups.calls == 0 and rt.sink.findings == []  # type: ignore[attr-defined]
    assert rt.ledger.decisions[0][1].verdict == "ignored"  # type: ignore[attr-defined]
    assert ("tcp", 22, "0.0.0.0/0") in live_rules(ec2, group)


@pytest.mark.parametrize(
    "bad",
    [
        {
            "detail-type": "AWS API Call via CloudTrail",
            "source": "aws.ec2",
            "id": "e-1",
            "detail": {"eventName": "RunInstances"},
        },
        "not an event",
        {
            "version": "0",
            "id": "e-2",
            "detail-type": "AWS API Call via CloudTrail",
            "source": "aws.ec2",
            "account": "1",
            "time": "2026-11-30T09:00:00Z",
            "region": REGION,
            "resources": [],
            "detail": {
                "eventTime": "2026-11-30T09:00:00Z",
                "eventSource": "ec2.amazonaws.com",
                "eventName": "DeleteVpc",
            },
        },
    ],
    ids=["missing-fields", "not-an-object", "unsupported-call"],
)
def test_bad_input_goes_to_the_dlq_and_nothing_is_acted_on(ec2: Any, bad: Any) -> None:
    rt, adapters = runtime(enforce=True), aws()
    result = handle(bad, rt, adapters)
    assert result["status"] == "rejected"
    ((parked, reason),) = rt.dead_letters.messages  # type: ignore[attr-defined]
    assert parked == bad and reason
    assert rt.ledger.decisions == [] and adapters.groups.calls == 0  # type: ignore[attr-defined]


# --- public addresses -------------------------------------------------------------------------------------------------


def _gpu_with_public_ip(ec2: Any, vpc: str, itype: str = "g5.xlarge", cidr: str = "10.0.1.0/24") -> dict[str, Any]:
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr)["Subnet"]["SubnetId"]
    image = IMAGE
    return ec2.run_instances(
        ImageId=image,
        InstanceType=itype,
        MinCount=1,
        MaxCount=1,
        NetworkInterfaces=[{"DeviceIndex": 0, "SubnetId": subnet, "AssociatePublicIpAddress": True}],
    )["Instances"][0]


def test_run_instances_auto_assigned_address_is_dropped_through_the_network_interface(ec2: Any) -> None:
    vpc, _ = new_group(ec2)
    instance = _gpu_with_public_ip(ec2, vpc)
    calls: list[dict[str, Any]] = []
    adapters = aws()
    adapters.addresses._ec2.meta.events.register(  # moto accepts but ignores AssociatePublicIpAddress
        "provide-client-params.ec2.ModifyNetworkInterfaceAttribute", lambda params, **_: calls.append(dict(params))
    )
    event = cloudtrail(
        "RunInstances",
        {
            "instanceType": "g5.xlarge",
            "networkInterfaceSet": {"items": [{"deviceIndex": 0, "associatePublicIpAddress": True}]},
        },
        {"instancesSet": {"items": [{"instanceId": instance["InstanceId"], "instanceType": "g5.xlarge"}]}},
    )
    rt = runtime(enforce=True)
    result = handle(event, rt, adapters)
    eni = instance["NetworkInterfaces"][0]["NetworkInterfaceId"]
    assert calls == [{"NetworkInterfaceId": eni, "AssociatePublicIpAddress": False}]
    (finding,) = rt.sink.findings  # type: ignore[attr-defined]
    assert f"AssociatePublicIpAddress=false on {eni}" in finding.detail and finding.team == "unknown"
    assert "removed auto-assigned public IPv4" in result["decisions"][0]["done"][0]


def test_associate_address_on_a_gpu_instance_is_disassociated(ec2: Any) -> None:
    vpc, _ = new_group(ec2)
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.2.0/24")["Subnet"]["SubnetId"]
    image = IMAGE
    gpu, cpu = (
        ec2.run_instances(ImageId=image, InstanceType=t, MinCount=1, MaxCount=1, SubnetId=subnet)["Instances"][0][
            "InstanceId"
        ]
        for t in ("p4d.24xlarge", "m5.large")
    )
    for instance in (gpu, cpu):
        allocation = ec2.allocate_address(Domain="vpc")
        association = ec2.associate_address(AllocationId=allocation["AllocationId"], InstanceId=instance)
        event = cloudtrail(
            "AssociateAddress",
            {"instanceId": instance, "allocationId": allocation["AllocationId"]},
            {"associationId": association["AssociationId"], "_return": True},
        )
        handle(event, runtime(enforce=True), aws())
    public = {
        i["InstanceId"]: i.get("PublicIpAddress")
        for r in ec2.describe_instances(InstanceIds=[gpu, cpu])["Reservations"]
        for i in r["Instances"]
    }
    assert public[gpu] is None and public[cpu] is not None


# --- the sweep --------------------------------------------------------------------------------------------------------


def test_daily_sweep_finds_drift_in_every_group_and_gpu_instance(ec2: Any) -> None:
    vpc, open_group = new_group(ec2, "open")
    _, clean_group = new_group(ec2, "clean")
    ec2.authorize_security_group_ingress(GroupId=open_group, IpPermissions=MIXED)
    ec2.authorize_security_group_ingress(
        GroupId=clean_group, IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": clean_group}]}]
    )
    gpu = _gpu_with_public_ip(ec2, vpc)
    allocation = ec2.allocate_address(Domain="vpc")
    ec2.associate_address(AllocationId=allocation["AllocationId"], InstanceId=gpu["InstanceId"])
    cpu = _gpu_with_public_ip(ec2, vpc, "m5.large", "10.0.3.0/24")
    rt, adapters = runtime(enforce=True), aws()
    dropped: list[str] = []
    adapters.addresses._ec2.meta.events.register(  # moto accepts but ignores AssociatePublicIpAddress
        "provide-client-params.ec2.ModifyNetworkInterfaceAttribute",
        lambda params, **_: dropped.append(params["NetworkInterfaceId"]),
    )
    result = handle(scheduled(), rt, adapters)
    assert result["status"] == "swept" and result["gpu_instances"] == 1 and result["violations"] == 2
    assert live_rules(ec2, open_group) == {("tcp", 22, "10.0.0.0/8")}
    assert live_rules(ec2, clean_group) == {("-1", -1, clean_group)}
    (address,) = ec2.describe_addresses(AllocationIds=[allocation["AllocationId"]])["Addresses"]
    assert "AssociationId" not in address  # the Elastic IP left the GPU instance, the allocation stays
    # AWS then auto-assigns a fresh address to the interface; the governor drops that one too (and only that one)
    assert dropped == [gpu["NetworkInterfaces"][0]["NetworkInterfaceId"]]
    (done,) = [d for d in result["done"] if "Elastic IP" in d]
    assert "then removed the auto-assigned" in done
    assert cpu["InstanceId"] not in " ".join(result["done"])
    verdicts = {d.resource: d.verdict for _, d in rt.ledger.decisions}  # type: ignore[attr-defined]
    assert verdicts[clean_group] == "ok" and verdicts[open_group] == "act"
    # one listing of rules and one of groups (one page each), the open group re-read before revoking (group and
    # rules), two revocations, each followed by the re-read that verifies it (group and rules)
    assert adapters.groups.calls == 10


def test_launch_the_event_shows_is_not_gpu_needs_no_read(ec2: Any) -> None:
    event = cloudtrail(
        "RunInstances",
        {
            "instanceType": "m5.large",
            "networkInterfaceSet": {"items": [{"deviceIndex": 0, "associatePublicIpAddress": True}]},
        },
        {"instancesSet": {"items": [{"instanceId": "i-0123456789abcdef0", "instanceType": "m5.large"}]}},
    )
    rt, adapters = runtime(enforce=True), aws()
    handle(event, rt, adapters)
    assert adapters.instances.calls == 0 and adapters.addresses.calls == 0 and rt.sink.findings == []  # type: ignore[attr-defined]
    assert rt.ledger.decisions[0][1].verdict == "ignored"  # type: ignore[attr-defined]


def test_one_failing_revocation_does_not_stop_the_sweep(ec2: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, first = new_group(ec2, "first")
    _, second = new_group(ec2, "second")
    for group in (first, second):
        ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=MIXED)
    rt, adapters = runtime(enforce=True), aws()
    real_revoke = adapters.groups.revoke

    def revoke(group_id: str, rule_id: str) -> bool:
        if group_id == first:
            raise RuntimeError("RequestLimitExceeded")
        return real_revoke(group_id, rule_id)

    monkeypatch.setattr(adapters.groups, "revoke", revoke)
    with pytest.raises(SweepIncompleteError, match="1 of 2 violations could not be fixed"):
        handle(scheduled(), rt, adapters)
    assert ("tcp", 22, "0.0.0.0/0") in live_rules(ec2, first)
    assert live_rules(ec2, second) == {("tcp", 22, "10.0.0.0/8")}
    failed = next(f for f in rt.sink.findings if f.resource == first)  # type: ignore[attr-defined]
    assert "revoke_ingress failed: RequestLimitExceeded" in failed.detail


def test_a_group_without_an_owner_tag_is_owned_by_whoever_opened_the_rule(ec2: Any) -> None:
    """Issue 48 item 5: the world-open SSH finding said "Owner unknown" while ``governor audit`` on the same trail
    named who opened port 22. The caller is recorded with the decision and owns the finding, as the report says."""
    import datetime as dt

    from governor.report.build import build_report

    _, group = new_group(ec2, tags={"team": "vision"})
    caller = "arn:aws:sts::123456789012:assumed-role/ml-engineer/erin"
    event = authorize(ec2, group)
    event["detail"]["userIdentity"] = {"type": "AssumedRole", "arn": caller}
    rt = runtime()
    handle(event, rt, aws())
    (finding,) = rt.sink.findings  # type: ignore[attr-defined]
    assert (finding.owner, finding.team) == (caller, "vision")
    ((_, decision),) = rt.ledger.decisions  # type: ignore[attr-defined]
    assert decision.evidence["opened_by"] == caller
    end = dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)
    item = {**decision.model_dump(mode="json"), "at": "2026-11-30T09:00:00+00:00", "kind": "decision"}
    report = build_report(
        kind="daily",
        start=end - dt.timedelta(days=1),
        end=end,
        policy=rt.policy,
        audit={},
        ledger_items=[item],
        now=end,
    )
    rows = [f for f in report.open_findings if f.resource == group]
    assert rows and {f.owner for f in rows} == {"erin"}
