"""The local audit engine over real and synthetic CloudTrail files, checked against an independent Python reading.

The expectations here never use the engine or the SQL: they scan the JSON with plain Python, so a test compares two
independent answers.
"""

from __future__ import annotations

import datetime as dt
import gzip
import ipaddress
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from governor.audit.engine import AuditRun, run_audit
from governor.audit.queries import QUERIES_DIR, QueryError, list_queries, parse_time, to_positional
from tests.conftest import CLOUDTRAIL_DIR

ACCOUNT = "111122223333"
GPU = re.compile(r"^(p|g|trn|inf|dl)[0-9]")


def when(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def record(
    event_id: str,
    time: str,
    name: str,
    source: str = "ec2.amazonaws.com",
    *,
    arn: str = f"arn:aws:iam::{ACCOUNT}:user/alice",
    identity_type: str = "IAMUser",
    request: dict[str, Any] | None = None,
    response: dict[str, Any] | None = None,
    error: str | None = None,
    message: str | None = None,
    extra: dict[str, Any] | None = None,
    region: str = "us-east-1",
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "eventVersion": "1.09",
        "userIdentity": {"type": identity_type, "arn": arn, "accountId": ACCOUNT, "principalId": "AIDAEXAMPLE"},
        "eventTime": time,
        "eventSource": source,
        "eventName": name,
        "awsRegion": region,
        "sourceIPAddress": "198.51.100.7",
        "userAgent": "aws-cli/2",
        "requestParameters": request,
        "responseElements": response,
        "requestID": f"req-{event_id}",
        "eventID": event_id,
        "readOnly": False,
        "eventType": "AwsApiCall",
        "managementEvent": True,
        "recipientAccountId": ACCOUNT,
        "eventCategory": "Management",
    }
    if error:
        item["errorCode"] = error
        item["errorMessage"] = message or error
    item.update(extra or {})
    return item


def run_instances(event_id: str, time: str, instance_type: str, ids: list[str], **kwargs: Any) -> dict[str, Any]:
    request = {"instancesSet": {"items": [{"imageId": "ami-1", "minCount": 1, "maxCount": max(1, len(ids))}]}}
    request["instanceType"] = instance_type
    response = (
        None
        if kwargs.get("error")
        else {"instancesSet": {"items": [{"instanceId": i, "instanceType": instance_type} for i in ids]}}
    )
    return record(event_id, time, "RunInstances", request=request, response=response, **kwargs)


def state_change(event_id: str, time: str, name: str, ids: list[str], **kwargs: Any) -> dict[str, Any]:
    items = {"instancesSet": {"items": [{"instanceId": i} for i in ids]}}
    return record(event_id, time, name, request=items, response=None if kwargs.get("error") else items, **kwargs)


def synthetic_events() -> dict[str, list[dict[str, Any]]]:
    """Key date (YYYY/MM/DD) -> records, covering every query's edge cases, around 2024-05-01..2024-05-03."""
    bob = f"arn:aws:iam::{ACCOUNT}:user/bob"
    world_nested = {
        "groupId": "sg-1",
        "ipPermissions": {
            "items": [
                {
                    "ipProtocol": "tcp",
                    "fromPort": 22,
                    "toPort": 22,
                    "ipRanges": {"items": [{"cidrIp": "10.0.0.0/8"}]},
                    "ipv6Ranges": {"items": [{"cidrIpv6": "::/0"}]},
                }
            ]
        },
    }
    world_flat = {
        "groupName": "legacy",
        "ipProtocol": "tcp",
        "fromPort": 3389,
        "toPort": 3389,
        "cidrIp": "203.0.113.9/0",
    }
    private = {"groupId": "sg-2", "ipPermissions": {"items": [{"ipRanges": {"items": [{"cidrIp": "10.0.0.0/8"}]}}]}}
    login = {"LoginTo": "https://console.aws.amazon.com", "MFAUsed": "No"}
    return {
        "2024/04/20": [record("old-1", "2024-04-20T10:00:00Z", "DeleteTrail", "cloudtrail.amazonaws.com")],
        "2024/05/01": [
            run_instances("run-g5", "2024-05-01T08:00:00Z", "g5.xlarge", ["i-a", "i-b"]),
            run_instances(
                "run-p4-failed",
                "2024-05-01T08:05:00Z",
                "p4d.24xlarge",
                [],
                arn=bob,
                error="Client.InsufficientInstanceCapacity",
            ),
            run_instances("run-t3", "2024-05-01T08:10:00Z", "t3.micro", ["i-c"]),
            run_instances("run-gr6", "2024-05-01T08:11:00Z", "gr6.4xlarge", ["i-d"]),
            run_instances("run-trn", "2024-05-01T09:00:00Z", "trn1.32xlarge", ["i-e"], arn=bob),
            record("sg-world-nested", "2024-05-01T09:30:00Z", "AuthorizeSecurityGroupIngress", request=world_nested),
            record("sg-world-flat", "2024-05-01T09:31:00Z", "AuthorizeSecurityGroupIngress", request=world_flat),
            record("sg-private", "2024-05-01T09:32:00Z", "AuthorizeSecurityGroupIngress", request=private),
            record(
                "sg-world-failed",
                "2024-05-01T09:33:00Z",
                "AuthorizeSecurityGroupIngress",
                request=world_flat,
                error="Client.InvalidGroup.NotFound",
            ),
            record(
                "root-1",
                "2024-05-01T11:00:00Z",
                "ListBuckets",
                "s3.amazonaws.com",
                identity_type="Root",
                arn=f"arn:aws:iam::{ACCOUNT}:root",
            ),
            record(
                "login-nomfa",
                "2024-05-01T12:00:00Z",
                "ConsoleLogin",
                "signin.amazonaws.com",
                response={"ConsoleLogin": "Success"},
                extra={"additionalEventData": login, "eventType": "AwsConsoleSignIn"},
            ),
            record(
                "login-failed",
                "2024-05-01T12:01:00Z",
                "ConsoleLogin",
                "signin.amazonaws.com",
                response={"ConsoleLogin": "Failure"},
                error="Failed authentication",
                message="Failed authentication",
                extra={"eventType": "AwsConsoleSignIn"},
            ),
            record("kms-disable", "2024-05-01T13:00:00Z", "DisableKey", "kms.amazonaws.com", request={"keyId": "k-1"}),
            record(
                "kms-rotation",
                "2024-05-01T13:01:00Z",
                "EnableKeyRotation",
                "kms.amazonaws.com",
                request={"keyId": "k-1", "rotationPeriodInDays": 90},
            ),
            record("denied", "2024-05-01T13:02:00Z", "DescribeInstances", error="Client.UnauthorizedOperation"),
        ],
        "2024/05/02": [
            state_change("stop-a", "2024-05-01T20:00:00Z", "StopInstances", ["i-a"]),
            state_change("start-a", "2024-05-02T08:00:00Z", "StartInstances", ["i-a"]),
            state_change("term-b", "2024-05-01T18:00:00Z", "TerminateInstances", ["i-b"]),
            state_change(
                "stop-e-failed", "2024-05-01T10:00:00Z", "StopInstances", ["i-e"], error="Client.IncorrectInstanceState"
            ),
            record(
                "access-key",
                "2024-05-02T09:00:00Z",
                "CreateAccessKey",
                "iam.amazonaws.com",
                request={"userName": "svc"},
                response={"accessKey": {"accessKeyId": "AKIAEXAMPLE", "status": "Active", "userName": "svc"}},
            ),
            # the same event delivered twice (CloudTrail delivers at least once): one row
            record("kms-disable", "2024-05-01T13:00:00Z", "DisableKey", "kms.amazonaws.com", request={"keyId": "k-1"}),
        ],
        "2024/05/03": [
            state_change("term-a", "2024-05-02T23:30:00Z", "TerminateInstances", ["i-a"]),
            record("after-range", "2024-05-03T00:10:00Z", "DeleteTrail", "cloudtrail.amazonaws.com"),
        ],
        "2024/05/10": [record("later-1", "2024-05-10T10:00:00Z", "StopLogging", "cloudtrail.amazonaws.com")],
    }


def write_awslogs(root: Path, events: dict[str, list[dict[str, Any]]], *, region: str = "us-east-1") -> list[Path]:
    """One ``.json.gz`` per key date in the ``AWSLogs/<account>/CloudTrail/<region>/YYYY/MM/DD/`` layout."""
    written = []
    for day, records in events.items():
        folder = root / "AWSLogs" / ACCOUNT / "CloudTrail" / region / day
        folder.mkdir(parents=True, exist_ok=True)
        stamp = day.replace("/", "")
        path = folder / f"{ACCOUNT}_CloudTrail_{region}_{stamp}T0005Z_synthetic.json.gz"
        path.write_bytes(gzip.compress(json.dumps({"Records": records}).encode()))
        written.append(path)
    return written


def read_records(folder: Path) -> list[dict[str, Any]]:
    """Every record of every readable CloudTrail file under ``folder``, read with plain Python."""
    found: list[dict[str, Any]] = []
    for path in sorted(folder.rglob("*")):
        if not path.name.endswith((".json", ".json.gz")):
            continue
        try:
            raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
            found.extend(json.loads(raw).get("Records") or [])
        except (OSError, ValueError, AttributeError):
            continue
    return found


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def _world_open(request: Any) -> bool:
    for key, value in _walk(request):
        if (
            key in ("cidrIp", "cidrIpv6")
            and isinstance(value, str)
            and ipaddress.ip_network(value, strict=False).prefixlen == 0
        ):
            return True
    return False


def _instance_type(r: dict[str, Any]) -> str:
    request = r.get("requestParameters") or {}
    items = ((r.get("responseElements") or {}).get("instancesSet") or {}).get("items") or [{}]
    return request.get("instanceType") or items[0].get("instanceType") or ""


NAMED = {
    "iam_policy_changes": (
        "iam.amazonaws.com",
        "DeleteGroupPolicy DeleteRolePolicy DeleteUserPolicy PutGroupPolicy PutRolePolicy PutUserPolicy CreatePolicy DeletePolicy CreatePolicyVersion DeletePolicyVersion SetDefaultPolicyVersion AttachRolePolicy DetachRolePolicy AttachUserPolicy DetachUserPolicy AttachGroupPolicy DetachGroupPolicy",
    ),
    "cloudtrail_config_changes": (
        "cloudtrail.amazonaws.com",
        "CreateTrail UpdateTrail DeleteTrail StartLogging StopLogging PutEventSelectors",
    ),
    "kms_key_disable_or_deletion": ("kms.amazonaws.com", "DisableKey ScheduleKeyDeletion"),
    "s3_bucket_policy_changes": (
        "s3.amazonaws.com",
        "PutBucketAcl PutBucketPolicy PutBucketCors PutBucketLifecycle PutBucketReplication DeleteBucketPolicy DeleteBucketCors DeleteBucketLifecycle DeleteBucketReplication",
    ),
    "config_changes": (
        "config.amazonaws.com",
        "StopConfigurationRecorder DeleteDeliveryChannel PutDeliveryChannel PutConfigurationRecorder",
    ),
    "security_group_changes": (
        "ec2.amazonaws.com",
        "AuthorizeSecurityGroupIngress AuthorizeSecurityGroupEgress RevokeSecurityGroupIngress RevokeSecurityGroupEgress CreateSecurityGroup DeleteSecurityGroup ModifySecurityGroupRules",
    ),
    "nacl_changes": (
        "ec2.amazonaws.com",
        "CreateNetworkAcl CreateNetworkAclEntry DeleteNetworkAcl DeleteNetworkAclEntry ReplaceNetworkAclEntry ReplaceNetworkAclAssociation",
    ),
    "network_gateway_changes": (
        "ec2.amazonaws.com",
        "CreateCustomerGateway DeleteCustomerGateway AttachInternetGateway CreateInternetGateway DeleteInternetGateway DetachInternetGateway",
    ),
    "route_table_changes": (
        "ec2.amazonaws.com",
        "CreateRoute CreateRouteTable ReplaceRoute ReplaceRouteTableAssociation DeleteRouteTable DeleteRoute DisassociateRouteTable",
    ),
    "vpc_changes": (
        "ec2.amazonaws.com",
        "CreateVpc DeleteVpc ModifyVpcAttribute AcceptVpcPeeringConnection CreateVpcPeeringConnection DeleteVpcPeeringConnection RejectVpcPeeringConnection AttachClassicLinkVpc DetachClassicLinkVpc DisableVpcClassicLink EnableVpcClassicLink",
    ),
    "organizations_changes": (
        "organizations.amazonaws.com",
        "AcceptHandshake AttachPolicy CreateAccount CreateOrganizationalUnit CreatePolicy DeclineHandshake DeleteOrganization DeleteOrganizationalUnit DeletePolicy DetachPolicy DisablePolicyType EnablePolicyType InviteAccountToOrganization LeaveOrganization MoveAccount RemoveAccountFromOrganization UpdatePolicy UpdateOrganizationalUnit",
    ),
    "kms_rotation_changes": ("kms.amazonaws.com", "EnableKeyRotation DisableKeyRotation RotateKeyOnDemand"),
    "access_key_events": ("iam.amazonaws.com", "CreateAccessKey UpdateAccessKey DeleteAccessKey"),
}


def matches(query: str, r: dict[str, Any]) -> bool:
    """Whether record ``r`` is one of ``query``'s rows (the CIS metric filters and the issue's definitions)."""
    ui = r.get("userIdentity") or {}
    error = r.get("errorCode") or ""
    if query in NAMED:
        source, names = NAMED[query]
        return r["eventSource"] == source and r["eventName"] in names.split()
    if query == "unauthorized_api_calls":
        return error.endswith("UnauthorizedOperation") or error.startswith("AccessDenied")
    if query == "console_login_without_mfa":
        return (
            r["eventName"] == "ConsoleLogin"
            and ui.get("type") == "IAMUser"
            and (r.get("responseElements") or {}).get("ConsoleLogin") == "Success"
            and (r.get("additionalEventData") or {}).get("MFAUsed", "No") != "Yes"
        )
    if query == "console_login_failures":
        return r["eventName"] == "ConsoleLogin" and (
            r.get("errorMessage") == "Failed authentication"
            or (r.get("responseElements") or {}).get("ConsoleLogin") == "Failure"
        )
    if query == "root_account_usage":
        return ui.get("type") == "Root" and not ui.get("invokedBy") and r.get("eventType") != "AwsServiceEvent"
    if query == "gpu_instance_launches":
        return (
            r["eventSource"] == "ec2.amazonaws.com"
            and r["eventName"] == "RunInstances"
            and bool(GPU.match(_instance_type(r)))
        )
    if query == "world_open_ingress":
        return (
            r["eventSource"] == "ec2.amazonaws.com"
            and r["eventName"] == "AuthorizeSecurityGroupIngress"
            and not error
            and _world_open(r.get("requestParameters"))
        )
    raise KeyError(query)


def in_range(records: Iterable[dict[str, Any]], start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
    """Records whose eventTime is in [start, end), one per eventID (the earliest), ordered by time then id."""
    by_id: dict[str, dict[str, Any]] = {}
    for r in records:
        if start <= when(r["eventTime"]) < end:
            kept = by_id.get(r["eventID"])
            if kept is None or r["eventTime"] < kept["eventTime"]:
                by_id[r["eventID"]] = r
    return sorted(by_id.values(), key=lambda r: (r["eventTime"], r["eventID"]))


def expected_ids(query: str, records: list[dict[str, Any]], start: dt.datetime, end: dt.datetime) -> list[str]:
    return [r["eventID"] for r in in_range(records, start, end) if matches(query, r)]


def expected_gpu_hours(
    records: list[dict[str, Any]], start: dt.datetime, end: dt.datetime
) -> dict[tuple[str, str], tuple[int, float]]:
    """(creator, type) -> (instances, hours): launches in range, running until the next stop/terminate or the end."""
    events = [
        r
        for r in in_range(records, start, end)
        if r["eventSource"] == "ec2.amazonaws.com"
        and r["eventName"] in ("RunInstances", "StartInstances", "StopInstances", "TerminateInstances")
        and not r.get("errorCode")
    ]
    launched: dict[str, tuple[str, str]] = {}
    transitions: dict[str, list[tuple[dt.datetime, str, bool]]] = {}
    for r in events:
        items = ((r.get("responseElements") or {}).get("instancesSet") or {}).get("items") or []
        for item in items:
            if r["eventName"] == "RunInstances" and GPU.match(item.get("instanceType") or ""):
                launched[item["instanceId"]] = (r["userIdentity"]["arn"], item["instanceType"])
            running = r["eventName"] in ("RunInstances", "StartInstances")
            transitions.setdefault(item["instanceId"], []).append((when(r["eventTime"]), r["eventID"], running))
    totals: dict[tuple[str, str], list[Any]] = {}
    for instance, key in launched.items():
        steps = sorted(transitions[instance])
        seconds = 0.0
        for index, (at, _, running) in enumerate(steps):
            if running:
                stop = steps[index + 1][0] if index + 1 < len(steps) else end
                seconds += (stop - at).total_seconds()
        entry = totals.setdefault(key, [set(), 0.0])
        entry[0].add(instance)
        entry[1] += seconds
    return {key: (len(ids), round(seconds / 3600, 3)) for key, (ids, seconds) in totals.items()}


# ---------------------------------------------------------------------------------------------------------- tests

QUERY_NAMES = sorted(p.stem for p in QUERIES_DIR.glob("*.sql"))
REAL_START, REAL_END = when("2023-07-10T00:00:00Z"), when("2023-07-11T00:00:00Z")
SYN_START, SYN_END = when("2024-05-01T00:00:00Z"), when("2024-05-03T00:00:00Z")


@pytest.fixture(scope="module")
def real_run() -> AuditRun:
    return run_audit(CLOUDTRAIL_DIR, start=REAL_START, end=REAL_END)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trail")
    write_awslogs(root, synthetic_events())
    return root


@pytest.fixture(scope="module")
def synthetic_run(synthetic: Path) -> AuditRun:
    return run_audit(synthetic, start=SYN_START, end=SYN_END)


def test_library_has_every_query_the_issue_names() -> None:
    required = {
        "unauthorized_api_calls": "4.1",
        "console_login_without_mfa": "4.2",
        "root_account_usage": "4.3",
        "iam_policy_changes": "4.4",
        "cloudtrail_config_changes": "4.5",
        "console_login_failures": "4.6",
        "kms_key_disable_or_deletion": "4.7",
        "s3_bucket_policy_changes": "4.8",
        "config_changes": "4.9",
        "security_group_changes": "4.10",
        "nacl_changes": "4.11",
        "network_gateway_changes": "4.12",
        "route_table_changes": "4.13",
        "vpc_changes": "4.14",
        "organizations_changes": "4.15",
    }
    others = {
        "gpu_instance_launches",
        "world_open_ingress",
        "kms_rotation_changes",
        "access_key_events",
        "gpu_instance_hours",
    }
    specs = {spec.name: spec for spec in list_queries()}
    assert set(required) | others <= set(specs)
    for name, item in required.items():
        assert specs[name].cis == item
    for spec in specs.values():
        assert spec.purpose and spec.parameters == ("start", "end")
        assert "from_iso8601_timestamp(eventtime)" in spec.sql and "day BETWEEN" in spec.sql


@pytest.mark.parametrize("query", [q for q in QUERY_NAMES if q != "gpu_instance_hours"])
def test_every_query_returns_the_right_events_from_the_real_records(real_run: AuditRun, query: str) -> None:
    expected = expected_ids(query, read_records(CLOUDTRAIL_DIR), REAL_START, REAL_END)
    rows = real_run.results[query]["rows"]
    assert [row["eventid"] for row in rows] == expected
    assert real_run.results[query]["count"] == len(expected)


def test_the_real_records_exercise_the_queries(real_run: AuditRun) -> None:
    """The shared data set has rows for most queries, so the test above is not comparing empty lists."""
    assert real_run.records == 2900 and real_run.skipped == []
    non_empty = {name for name, result in real_run.results.items() if result["count"]}
    assert {"unauthorized_api_calls", "iam_policy_changes", "world_open_ingress", "gpu_instance_launches"} <= non_empty
    assert len(non_empty) >= 12


@pytest.mark.parametrize("query", [q for q in QUERY_NAMES if q != "gpu_instance_hours"])
def test_every_query_returns_the_right_events_from_synthetic_edge_cases(
    synthetic: Path, synthetic_run: AuditRun, query: str
) -> None:
    expected = expected_ids(query, read_records(synthetic), SYN_START, SYN_END)
    assert [row["eventid"] for row in synthetic_run.results[query]["rows"]] == expected


def test_synthetic_edge_cases_land_where_the_issue_says(synthetic_run: AuditRun) -> None:
    ids = {n: [row.get("eventid") for row in result["rows"]] for n, result in synthetic_run.results.items()}
    assert ids["world_open_ingress"] == ["sg-world-nested", "sg-world-flat"]  # IPv6 ::/0 and a non-canonical /0
    assert ids["gpu_instance_launches"] == ["run-g5", "run-p4-failed", "run-trn"]  # failed included, gr6/t3 not
    assert ids["kms_key_disable_or_deletion"] == ["kms-disable"]  # delivered twice, one row
    assert "after-range" not in ids["cloudtrail_config_changes"]
    failed = synthetic_run.results["gpu_instance_launches"]["rows"][1]
    assert failed["errorcode"] == "Client.InsufficientInstanceCapacity" and failed["instance_type"] == "p4d.24xlarge"
    flat = synthetic_run.results["world_open_ingress"]["rows"][1]
    assert flat["world_cidrs"] == "203.0.113.9/0" and flat["from_port"] == 3389


def test_gpu_instance_hours_per_creator_and_type(synthetic: Path, synthetic_run: AuditRun) -> None:
    expected = expected_gpu_hours(read_records(synthetic), SYN_START, SYN_END)
    rows = synthetic_run.results["gpu_instance_hours"]["rows"]
    got = {(r["creator"], r["instance_type"]): (r["instances"], r["instance_hours"]) for r in rows}
    assert got == expected
    alice = f"arn:aws:iam::{ACCOUNT}:user/alice"
    # i-a: 08:00-20:00 and 08:00-23:30 the next day; i-b: 08:00-18:00 -> 37.5 h. trn: from 09:00 to the range end.
    assert got[(alice, "g5.xlarge")] == (2, 37.5)
    assert got[(f"arn:aws:iam::{ACCOUNT}:user/bob", "trn1.32xlarge")] == (1, 39.0)


def test_gpu_instance_hours_on_the_real_records_matches_python(real_run: AuditRun) -> None:
    expected = expected_gpu_hours(read_records(CLOUDTRAIL_DIR), REAL_START, REAL_END)
    rows = real_run.results["gpu_instance_hours"]["rows"]
    assert {(r["creator"], r["instance_type"]): (r["instances"], r["instance_hours"]) for r in rows} == expected


def test_gpu_instance_hours_counts_long_open_sessions_to_the_second(tmp_path: Path) -> None:
    """Sessions still running at the range's end are counted in hundreds of hours, then hours, minutes, seconds."""
    events = {
        "2024/01/01": [run_instances("long-1", "2024-01-01T00:00:07Z", "p5.48xlarge", ["i-long"])],
        "2024/03/10": [run_instances("mid-1", "2024-03-10T13:59:59Z", "g6.xlarge", ["i-mid"])],
        "2024/05/02": [run_instances("short-1", "2024-05-02T23:30:00Z", "g5.xlarge", ["i-short"])],
    }
    write_awslogs(tmp_path, events)
    start, end = when("2024-01-01T00:00:00Z"), when("2024-05-03T00:00:00Z")
    rows = run_audit(tmp_path, ["gpu_instance_hours"], start, end).results["gpu_instance_hours"]["rows"]
    got = {r["instance_type"]: r["instance_hours"] for r in rows}
    assert got == {t: h for (_, t), (_, h) in expected_gpu_hours(read_records(tmp_path), start, end).items()}
    assert got["p5.48xlarge"] == round((end - when("2024-01-01T00:00:07Z")).total_seconds() / 3600, 3) > 2900
    assert got["g5.xlarge"] == 0.5


def test_files_outside_the_range_are_not_opened(tmp_path: Path) -> None:
    events = synthetic_events()
    written = write_awslogs(tmp_path, events)
    # Out-of-range files are garbage: opening one would report it as skipped.
    for path in written:
        if "/2024/04/20/" in path.as_posix() or "/2024/05/10/" in path.as_posix():
            path.write_bytes(b"not gzip at all")
    run = run_audit(tmp_path, ["cloudtrail_config_changes"], SYN_START, SYN_END)
    assert run.files_opened == 3 and run.files_pruned == 2 and run.skipped == []
    one_day = run_audit(
        tmp_path, ["cloudtrail_config_changes"], when("2024-05-02T00:00:00Z"), when("2024-05-02T01:00:00Z")
    )
    assert one_day.files_opened == 2  # the key date is the delivery date: that day and the next
    late = run_audit(
        tmp_path, ["cloudtrail_config_changes"], when("2024-05-12T00:00:00Z"), when("2024-05-13T00:00:00Z")
    )
    assert late.files_opened == 0 and late.results["cloudtrail_config_changes"]["count"] == 0


def test_without_a_range_every_file_is_opened(tmp_path: Path) -> None:
    write_awslogs(tmp_path, synthetic_events())
    run = run_audit(tmp_path, ["cloudtrail_config_changes"])
    assert run.files_opened == 5 and run.files_pruned == 0
    assert [r["eventid"] for r in run.results["cloudtrail_config_changes"]["rows"]] == [
        "old-1",
        "after-range",
        "later-1",
    ]


def test_malformed_files_are_reported_by_name_and_skipped(tmp_path: Path) -> None:
    write_awslogs(tmp_path, synthetic_events())
    clean = run_audit(tmp_path, ["kms_key_disable_or_deletion"], SYN_START, SYN_END)
    folder = tmp_path / "AWSLogs" / ACCOUNT / "CloudTrail" / "us-east-1" / "2024" / "05" / "01"
    (folder / "broken.json.gz").write_bytes(gzip.compress(b'{"Records": [{"eventID": '))
    (folder / "not-gzip.json.gz").write_bytes(b"plain text")
    (folder / "no-records.json").write_text('{"something": "else"}')
    (folder / "not-json.json").write_text("hello")
    (folder / "empty-records.json").write_text('{"Records": []}')  # a quiet hour: read, nothing in it, not skipped
    run = run_audit(tmp_path, ["kms_key_disable_or_deletion"], SYN_START, SYN_END)
    # the placeholder row that names no-records.json during the load is gone: only real records are counted
    assert run.records == clean.records > 0
    assert sorted(Path(f).name for f, _ in run.skipped) == [
        "broken.json.gz",
        "no-records.json",
        "not-gzip.json.gz",
        "not-json.json",
    ]
    assert all(reason for _, reason in run.skipped)
    assert run.results["kms_key_disable_or_deletion"]["count"] == 1  # the good files still count


def test_flat_folder_uses_the_cloudtrail_file_name_date(tmp_path: Path) -> None:
    for path in sorted(CLOUDTRAIL_DIR.glob("*.json"))[:3]:
        (tmp_path / path.name).write_bytes(path.read_bytes())
    (tmp_path / "export.json").write_text(
        json.dumps({"Records": [record("x-1", "2023-07-10T12:00:00Z", "StopLogging", "cloudtrail.amazonaws.com")]})
    )
    outside = run_audit(
        tmp_path, ["cloudtrail_config_changes"], when("2024-01-01T00:00:00Z"), when("2024-01-02T00:00:00Z")
    )
    assert outside.files_opened == 1 and outside.files_pruned == 3  # a name without a date is always opened
    inside = run_audit(tmp_path, ["cloudtrail_config_changes"], REAL_START, REAL_END)
    assert inside.files_opened == 4 and "x-1" in [
        r["eventid"] for r in inside.results["cloudtrail_config_changes"]["rows"]
    ]


def test_results_are_json_serialisable(synthetic_run: AuditRun) -> None:
    text = json.dumps(synthetic_run.results)
    assert json.loads(text) == synthetic_run.results


def test_unknown_query_and_bad_times_are_query_errors(synthetic: Path) -> None:
    with pytest.raises(QueryError, match="unknown query nope"):
        run_audit(synthetic, ["nope"])
    with pytest.raises(QueryError, match="not an ISO 8601 time"):
        parse_time("yesterday'; DROP TABLE x; --")
    with pytest.raises(QueryError, match="range is empty"):
        run_audit(synthetic, None, SYN_END, SYN_START)


def test_no_per_query_python(synthetic: Path, tmp_path: Path) -> None:
    """A new .sql file runs without any Python change: the engine only translates and binds."""
    folder = tmp_path / "queries"
    folder.mkdir()
    (folder / "stop_logging.sql").write_text(
        "-- name: stop_logging\n-- purpose: trails stopped\n-- cis: none\n-- parameters: :start, :end\n"
        "SELECT eventid FROM cloudtrail_logs\n"
        "WHERE from_iso8601_timestamp(eventtime) >= from_iso8601_timestamp(:start)\n"
        "  AND from_iso8601_timestamp(eventtime) < from_iso8601_timestamp(:end) AND eventname = 'StopLogging'\n"
    )
    run = run_audit(synthetic, None, when("2024-05-01T00:00:00Z"), when("2024-06-01T00:00:00Z"), queries_dir=folder)
    assert run.results == {"stop_logging": {"count": 1, "rows": [{"eventid": "later-1"}]}}


def test_header_must_match_the_parameters_used(tmp_path: Path) -> None:
    (tmp_path / "q.sql").write_text("-- name: q\n-- purpose: p\n-- parameters: :start, :end\nSELECT :start AS s\n")
    with pytest.raises(QueryError, match="every query takes :start and :end"):
        list_queries(tmp_path)


def test_placeholders_in_strings_and_comments_are_not_parameters() -> None:
    sql = "SELECT ':start' AS a, \"x:y\" AS b, CAST(c AS VARCHAR)::text -- :end\n/* :end */ FROM t WHERE d = :start"
    statement, names = to_positional(sql)
    assert names == ["start"] and statement.endswith("WHERE d = ?") and "':start'" in statement
