"""Network policy decisions from CloudTrail records alone: what an operator sees in ``governor explain``."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from governor.domain.decision import Decision
from governor.domain.fleet import Instance
from governor.events.envelopes import CloudTrailRecord
from governor.explain import explain
from governor.network.domain import decide_group, decide_public_ip
from governor.network.events import IngressRule, PublicAddress, Source, parse_call, public_address
from governor.network.rules import rule_violations
from governor.policy import Policy, parse_policy
from governor_cli.main import main
from tests.conftest import CLOUDTRAIL_DIR, ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "network"
GROUP = "sg-0a1b2c3d4e5f60718"
NOW = dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)


def policy(**network: Any) -> Policy:
    return parse_policy({"network": network})


def record(name: str, request: dict[str, Any], response: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "eventTime": "2026-11-30T09:00:00Z",
        "eventSource": "ec2.amazonaws.com",
        "eventName": name,
        "awsRegion": "us-east-1",
        "eventID": f"evt-{name}",
        "requestParameters": request,
        "responseElements": response,
        **extra,
    }


def ingress(*permissions: dict[str, Any], group: str = GROUP) -> dict[str, Any]:
    return record("AuthorizeSecurityGroupIngress", {"groupId": group, "ipPermissions": {"items": list(permissions)}})


def tcp(port: int | str, high: int | None = None, **sources: Any) -> dict[str, Any]:
    low = int(port)
    return {"ipProtocol": "tcp", "fromPort": low, "toPort": high if high is not None else low, **sources}


def cidrs(*values: str) -> dict[str, Any]:
    return {"items": [{"cidrIp": v} for v in values]}


def only(raw: dict[str, Any], pol: Policy | None = None) -> dict[str, Any]:
    result = explain(raw, pol or policy())
    network = [d for d in result["decisions"] if d["policy"] == "network"]
    assert len(network) == 1, result
    return network[0]


def revoked(decision: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(a["protocol"], a["ports"], a["source"]) for a in decision["actions"] if a["type"] == "revoke_ingress"]


def rule(protocol: str, low: int | None, high: int | None, kind: str, value: str) -> IngressRule:
    return IngressRule(GROUP, protocol, low, high, Source(kind, value))  # type: ignore[arg-type]


# --- the real records -------------------------------------------------------------------------------------------------


def _dataset_ec2_records() -> list[dict[str, Any]]:
    records = []
    for path in sorted(CLOUDTRAIL_DIR.glob("*.json")):
        records.extend(
            r for r in json.loads(path.read_text())["Records"] if r.get("eventSource") == "ec2.amazonaws.com"
        )
    return records


def test_the_two_world_open_ingress_calls_in_the_real_dataset_are_violations() -> None:
    records = [r for r in _dataset_ec2_records() if r["eventName"] == "AuthorizeSecurityGroupIngress"]
    assert len(records) == 2
    decisions = {r["eventID"]: only(r) for r in records}
    nested = decisions["7e96f0e7-4d78-423d-b3f5-391370685b30"]  # ipPermissions.items[] shape
    legacy = decisions["74bd84b4-6729-4895-b2a4-e2beb7c6b377"]  # flat cidrIp / fromPort / toPort shape
    for decision in (nested, legacy):
        assert decision["verdict"] == "act" and decision["resource"] == "sg-04cfb7a4712d75b00"
        assert {a["type"] for a in decision["actions"]} == {"revoke_ingress", "notify"}
    assert revoked(nested) == [("tcp", "443", "0.0.0.0/0")]
    assert revoked(legacy) == [("tcp", "22", "0.0.0.0/0")]
    assert nested["actions"][0]["rule_ids"] == ["sgr-0bb31cddb2c27f401"]
    assert legacy["actions"][0]["rule_ids"] == ["sgr-0a11552a7d225f5c7"]


def test_every_other_ec2_record_in_the_dataset_parses_and_gets_a_sensible_verdict() -> None:
    records = _dataset_ec2_records()
    assert len(records) > 800
    verdicts: dict[str, set[str]] = {}
    for raw in records:
        parse_call(CloudTrailRecord.model_validate(raw))
        for decision in explain(raw, policy())["decisions"]:
            if decision["policy"] == "network":
                verdicts.setdefault(raw["eventName"], set()).add(decision["verdict"])
    assert verdicts["AuthorizeSecurityGroupIngress"] == {"act"}
    assert verdicts["CreateSecurityGroup"] == {"ok"}
    assert verdicts["RunInstances"] == {"ignored"}  # t3.micro launches and failed p2.xlarge launches
    assert set(verdicts) == {"AuthorizeSecurityGroupIngress", "CreateSecurityGroup", "RunInstances"}


def test_failed_call_changed_nothing_and_is_ignored() -> None:
    failed = next(r for r in _dataset_ec2_records() if r["eventName"] == "RunInstances" and r.get("errorCode"))
    decision = only(failed)
    assert decision["verdict"] == "ignored" and decision["actions"] == []
    assert "failed" in decision["reasons"][0]
    raw = ingress(tcp(22, ipRanges=cidrs("0.0.0.0/0")))
    raw["errorCode"] = "Client.InvalidPermission.Duplicate"
    assert only(raw)["verdict"] == "ignored"


# --- request shapes ---------------------------------------------------------------------------------------------------


def test_nested_shape_fixture_revokes_only_the_world_rules_by_their_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["explain", str(FIXTURES / "authorize_nested.json"), "--policy", str(ROOT / "governor.yaml"), "--json"])
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["verdict"] == "act" and result["event"]["kind"] == "AuthorizeSecurityGroupIngress"
    (decision,) = result["decisions"]
    actions = [a for a in decision["actions"] if a["type"] == "revoke_ingress"]
    assert [(a["rule_ids"], a["ports"], a["source"], a["enforced"]) for a in actions] == [
        (["sgr-0000000000000a001"], "22", "203.0.113.9/0", False),  # non-canonical /0 is the world
        (["sgr-0000000000000a003"], "443", "::/0", False),  # IPv6 world
    ]
    assert any("3 rule(s) comply and stay" in r for r in decision["reasons"])  # private CIDR, prefix list, self


def test_cli_text_output_and_bad_event_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(FIXTURES / "modify_rules.json"), "--policy", str(ROOT / "governor.yaml")]) == 0
    out = capsys.readouterr().out
    assert "ModifySecurityGroupRules): WOULD ACT (report-only)" in out and "revoke_ingress (report-only)" in out
    bad = tmp_path / "bad.json"
    bad.write_text('{"eventName": "AuthorizeSecurityGroupIngress"}')
    assert main(["explain", str(bad), "--policy", str(ROOT / "governor.yaml")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err and err.count("\n") == 1


def test_flat_legacy_shape_without_response_ids() -> None:
    raw = record(
        "AuthorizeSecurityGroupIngress",
        {"groupId": GROUP, "ipProtocol": "6", "fromPort": "3389", "toPort": "3389", "cidrIp": "0.0.0.0/0"},
        {"_return": True},
    )
    decision = only(raw)
    assert revoked(decision) == [("tcp", "3389", "0.0.0.0/0")]
    assert decision["actions"][0]["rule_ids"] == []
    assert any("re-reading the group" in a for a in decision["assumptions"])


def test_group_references_and_prefix_lists_are_parsed() -> None:
    raw = ingress(
        tcp(2222, 2223, groups={"items": [{"groupId": "sg-0ther"}]}),
        tcp(443, prefixListIds={"items": [{"prefixListId": "pl-0123abcd"}]}),
    )
    call = parse_call(CloudTrailRecord.model_validate(raw))
    assert [(r.source.kind, r.source.value) for r in call.rules] == [
        ("group", "sg-0ther"),
        ("prefix_list", "pl-0123abcd"),
    ]
    assert revoked(only(raw)) == [("tcp", "2222-2223", "sg-0ther")]


@pytest.mark.parametrize(
    "request_body",
    [
        {
            "ModifySecurityGroupRulesRequest": {
                "GroupId": GROUP,
                "SecurityGroupRule": [
                    {
                        "SecurityGroupRuleId": "sgr-1",
                        "SecurityGroupRule": {
                            "IpProtocol": "tcp",
                            "FromPort": "22",
                            "ToPort": "22",
                            "CidrIpv6": "::/0",
                        },
                    },
                    {
                        "SecurityGroupRuleId": "sgr-2",
                        "SecurityGroupRule": {
                            "IpProtocol": "tcp",
                            "FromPort": 443,
                            "ToPort": 443,
                            "CidrIpv4": "10.0.0.0/8",
                        },
                    },
                ],
            }
        },
        {
            "groupId": GROUP,
            "securityGroupRules": {
                "items": [
                    {
                        "securityGroupRuleId": "sgr-1",
                        "securityGroupRule": {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv6": "::/0"},
                    },
                    {
                        "securityGroupRuleId": "sgr-2",
                        "securityGroupRule": {
                            "ipProtocol": "tcp",
                            "fromPort": 443,
                            "toPort": 443,
                            "cidrIpv4": "10.0.0.0/8",
                        },
                    },
                ]
            },
        },
    ],
    ids=["api-case", "camel-case"],
)
def test_modify_security_group_rules_revokes_only_the_modified_offender(request_body: dict[str, Any]) -> None:
    decision = only(record("ModifySecurityGroupRules", request_body, {"return": True}))
    assert decision["verdict"] == "act" and decision["resource"] == GROUP
    (action,) = [a for a in decision["actions"] if a["type"] == "revoke_ingress"]
    assert action["rule_ids"] == ["sgr-1"] and action["source"] == "::/0"


def test_modify_fixture_to_all_traffic_from_the_world() -> None:
    decision = only(json.loads((FIXTURES / "modify_rules.json").read_text()))
    (action,) = [a for a in decision["actions"] if a["type"] == "revoke_ingress"]
    assert (action["rule_ids"], action["protocol"], action["ports"]) == (["sgr-0000000000000a002"], "-1", "all")
    assert decision["reasons"][0].count("world") >= 1


# --- policy semantics -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "203.0.113.9/0", "::/0", "2001:db8::1/0"])
def test_any_prefix_length_zero_is_the_world(cidr: str) -> None:
    assert rule_violations(rule("tcp", 22, 22, "cidr", cidr), policy())


def test_world_open_allowed_ports_must_cover_the_whole_range() -> None:
    pol = policy(world_open_allowed_ports=[443, "80-100", "101-200"])
    assert not rule_violations(rule("tcp", 443, 443, "cidr", "0.0.0.0/0"), pol)
    assert not rule_violations(rule("tcp", 80, 200, "cidr", "::/0"), pol)  # adjacent allowed ranges join
    assert rule_violations(rule("tcp", 80, 443, "cidr", "0.0.0.0/0"), pol)  # 201-442 is not allowed
    assert rule_violations(rule("-1", None, None, "cidr", "0.0.0.0/0"), pol)  # all traffic never
    assert rule_violations(rule("icmp", 8, -1, "cidr", "0.0.0.0/0"), pol)  # no port to allow
    assert not rule_violations(rule("tcp", 22, 22, "cidr", "10.0.0.0/8"), pol)


def test_training_ports_only_to_the_group_itself() -> None:
    pol = policy()
    assert not rule_violations(rule("tcp", 2222, 2223, "group", GROUP), pol)
    assert rule_violations(rule("tcp", 2222, 2222, "group", "sg-0ther"), pol)
    assert rule_violations(rule("tcp", 2223, 2223, "cidr", "10.0.0.0/8"), pol)
    assert rule_violations(rule("tcp", 1000, 3000, "cidr", "10.0.0.0/8"), pol)  # a range that spans them
    assert rule_violations(rule("udp", 2222, 2222, "prefix_list", "pl-0123abcd"), pol)
    assert not rule_violations(rule("tcp", 2224, 2300, "cidr", "10.0.0.0/8"), pol)
    assert not rule_violations(rule("tcp", 2222, 2222, "group", "sg-0ther"), policy(training_ports=[]))


def test_all_traffic_only_to_self_or_trusted_sources() -> None:
    pol = policy(trusted_cidrs=["10.0.0.0/8", "fd00::/8"], trusted_prefix_lists=["pl-0123abcd"])
    assert not rule_violations(rule("-1", None, None, "group", GROUP), pol)
    assert not rule_violations(rule("-1", None, None, "cidr", "10.20.0.0/16"), pol)  # inside a trusted CIDR
    assert not rule_violations(rule("-1", None, None, "cidr", "fd00:1::/64"), pol)
    assert not rule_violations(rule("-1", None, None, "prefix_list", "pl-0123abcd"), pol)
    assert rule_violations(rule("-1", None, None, "cidr", "172.16.0.0/12"), pol)
    assert rule_violations(rule("-1", None, None, "cidr", "8.0.0.0/7"), pol)  # wider than the trusted one
    assert rule_violations(rule("-1", None, None, "prefix_list", "pl-0ffff"), pol)
    assert rule_violations(rule("-1", None, None, "group", "sg-0ther"), pol)


def test_protected_group_is_reported_never_changed() -> None:
    raw = ingress(tcp(22, ipRanges=cidrs("0.0.0.0/0")))
    decision = only(raw, policy(protected_groups={"ids": [GROUP]}))
    assert decision["verdict"] == "ignored" and decision["actions"] == []
    assert "protected" in decision["reasons"][0] and "to the world" in decision["reasons"][1]
    by_tag = decide_group(
        GROUP,
        [rule("tcp", 22, 22, "cidr", "0.0.0.0/0")],
        policy(enforce=True, protected_groups={"tags": {"platform": "*"}}),
        tags={"platform": "eks"},
    )
    assert by_tag.verdict == "ignored" and by_tag.severity == "warning" and not by_tag.actions


def test_created_group_protected_by_its_creation_tags() -> None:
    raw = record(
        "CreateSecurityGroup",
        {
            "groupName": "eks-nodes",
            "tagSpecificationSet": {
                "items": [{"resourceType": "security-group", "tags": [{"key": "platform", "value": "eks"}]}]
            },
        },
        {"groupId": "sg-0new", "_return": True},
    )
    assert only(raw)["verdict"] == "ok"
    assert only(raw, policy(protected_groups={"tags": {"platform": "eks"}}))["verdict"] == "ignored"


def test_enforce_marks_revocations_enforced_and_severity_follows_the_world() -> None:
    world = decide_group(GROUP, [rule("tcp", 22, 22, "cidr", "0.0.0.0/0")], policy(enforce=True))
    assert all(a.enforced for a in world.actions) and world.severity == "critical"
    training = decide_group(GROUP, [rule("tcp", 2222, 2222, "cidr", "10.0.0.0/8")], policy(enforce=True))
    assert training.verdict == "act" and training.severity == "warning"
    ok = decide_group(GROUP, [rule("tcp", 22, 22, "cidr", "10.0.0.0/8")], policy(enforce=True))
    assert ok.verdict == "ok" and not ok.actions


# --- public addresses -------------------------------------------------------------------------------------------------


def test_run_instances_gpu_with_public_ip_is_act_and_says_how_it_would_be_removed() -> None:
    decision = only(json.loads((FIXTURES / "run_instances_public.json").read_text()))
    assert decision["verdict"] == "act" and decision["resource"] == "i-0fedcba9876543210"
    remove = decision["actions"][0]
    assert remove["type"] == "remove_public_ip" and remove["method"] == "modify_network_interface_attribute"
    assert remove["enforced"] is False


def _launch(instance_type: str, public: bool | None) -> dict[str, Any]:
    interfaces = {"items": [{"deviceIndex": 0, "associatePublicIpAddress": public}]} if public is not None else {}
    return record(
        "RunInstances",
        {"instanceType": instance_type, "networkInterfaceSet": interfaces},
        {"instancesSet": {"items": [{"instanceId": "i-0abc", "instanceType": instance_type}]}},
    )


def test_run_instances_verdicts() -> None:
    assert only(_launch("m5.large", True))["verdict"] == "ignored"
    assert only(_launch("p4d.24xlarge", False))["verdict"] == "ok"
    subnet_default = only(_launch("g5.xlarge", None))
    assert subnet_default["verdict"] == "ok" and "subnet" in subnet_default["assumptions"][0]
    assert only(_launch("g5.xlarge", True), policy(public_ip_on_gpu="allow"))["verdict"] == "ok"
    exempt = _launch("g5.xlarge", True)
    exempt["requestParameters"]["tagSpecificationSet"] = {
        "items": [{"resourceType": "instance", "tags": [{"key": "governor:exempt", "value": "true"}]}]
    }
    assert only(exempt)["verdict"] == "ignored"


def test_associate_address_disassociates_the_elastic_ip() -> None:
    raw = record(
        "AssociateAddress",
        {"instanceId": "i-0abc", "allocationId": "eipalloc-1", "publicIp": "198.51.100.20"},
        {"associationId": "eipassoc-1", "_return": True},
    )
    decision = only(raw, policy(enforce=True))
    remove = decision["actions"][0]
    assert (remove["method"], remove["association_id"], remove["enforced"]) == (
        "disassociate_address",
        "eipassoc-1",
        True,
    )
    assert "GPU instance" in decision["assumptions"][0]


def test_modify_network_interface_attribute() -> None:
    def attr(value: Any) -> dict[str, Any]:
        return record("ModifyNetworkInterfaceAttribute", {"networkInterfaceId": "eni-1", **value}, {"_return": True})

    on = only(attr({"associatePublicIpAddress": True}))
    assert on["verdict"] == "act" and on["actions"][0]["network_interface_id"] == "eni-1"
    assert only(attr({"associatePublicIpAddress": {"value": False}}))["verdict"] == "ok"
    assert only(attr({"sourceDestCheck": {"value": False}}))["verdict"] == "ignored"


def _instance(public_ip: str | None, itype: str = "g5.xlarge") -> Instance:
    interface = {
        "NetworkInterfaceId": "eni-primary",
        "Attachment": {"DeviceIndex": 0},
        "Association": {"PublicIp": public_ip} if public_ip else {},
    }
    return Instance("i-0abc", itype, "running", NOW, public_ip=public_ip, network_interfaces=(interface,))


def test_live_address_kind_decides_the_removal_method() -> None:
    elastic = {"198.51.100.20": PublicAddress("198.51.100.20", True, association_id="eipassoc-9")}
    assert public_address(_instance(None), elastic) is None
    eip = public_address(_instance("198.51.100.20"), elastic)
    auto = public_address(_instance("198.51.100.99"), elastic)
    assert eip is not None and eip.removal()["method"] == "disassociate_address"
    assert auto is not None and auto.removal() == {
        "method": "modify_network_interface_attribute",
        "address": "auto-assigned",
        "network_interface_id": "eni-primary",
    }
    decision: Decision = decide_public_ip("i-0abc", "g5.xlarge", {}, auto, policy(enforce=True), NOW)
    assert decision.verdict == "act" and decision.enforced_actions()[0].type == "remove_public_ip"


def test_unrelated_ec2_calls_have_no_network_decision() -> None:
    result = explain(record("DescribeInstances", {}, None), policy())
    assert result == {
        "verdict": "ignored",
        "event": {"id": "evt-DescribeInstances", "kind": "DescribeInstances"},
        "decisions": [],
    }


def test_explain_command_as_installed(tmp_path: Path) -> None:
    legacy = next(r for r in _dataset_ec2_records() if r["eventID"] == "74bd84b4-6729-4895-b2a4-e2beb7c6b377")
    event = tmp_path / "ssh-open.json"
    event.write_text(json.dumps(legacy))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "governor_cli",
            "explain",
            str(event),
            "--policy",
            str(ROOT / "governor.yaml"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["verdict"] == "act" and result["decisions"][0]["actions"][0]["rule_ids"] == ["sgr-0a11552a7d225f5c7"]
