"""The hostile set: ~200 bad invocations of the ``governor`` command, each run as a real subprocess.

Counts what a user would see: tracebacks, hangs (no exit within the per-case timeout), exit codes that break the
contract (README.md, "The `governor` command": 0 ok, 1 a requested check failed, 2 bad input with one line), and error messages longer than
one line. AWS calls go to a local moto server, so ``ledger`` and ``dlq`` meet real-shaped AWS answers.

    python -m bench.hostile [--jobs 2] [--timeout 30] [--only SUBSTRING] [--verbose]

Not part of the pass/fail test run; ``tests/reliability/test_hostile.py`` runs the same cases in-process.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from governor_cli.testing import events

ROOT = Path(__file__).resolve().parents[1]
OK, FAILED, BAD = {0}, {1}, {2}


@dataclass(frozen=True)
class Case:
    """One invocation: ``argv`` after ``governor``; the exit codes the contract allows; optional stdin text."""

    name: str
    argv: tuple[str, ...]
    expect: frozenset[int]
    stdin: str | None = None
    head: bool = False  # pipe stdout into `head -1`: the command must end quietly with its usual status
    stdout_has: str | None = None
    needs: tuple[str, ...] = field(default=())


def _case(name: str, argv: list[str], expect: set[int], **extra: object) -> Case:
    return Case(name, tuple(argv), frozenset(expect), **extra)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------------
# Inputs, written once into a scratch folder


def _record(name: str = "AuthorizeSecurityGroupIngress", when: str = "2026-11-02T10:00:00Z", **extra: object) -> dict:
    record = {
        "eventVersion": "1.09",
        "eventTime": when,
        "eventSource": "ec2.amazonaws.com",
        "eventName": name,
        "awsRegion": "us-east-1",
        "sourceIPAddress": "198.51.100.7",
        "userIdentity": {"type": "IAMUser", "arn": "arn:aws:iam::123456789012:user/alice", "accountId": "123456789012"},
        "requestParameters": {
            "groupId": "sg-0a1b2c3d4e5f60718",
            "ipPermissions": {
                "items": [
                    {
                        "ipProtocol": "tcp",
                        "fromPort": 22,
                        "toPort": 22,
                        "ipRanges": {"items": [{"cidrIp": "0.0.0.0/0"}]},
                    }
                ]
            },
        },
        "responseElements": {"_return": True},
        "eventID": "5f0c9d9e-0000-4000-8000-000000000001",
        "recipientAccountId": "123456789012",
    }
    record.update(extra)
    return record


def _eventbridge(detail_type: str, detail: object, source: str = "aws.ec2") -> dict:
    return events.envelope(
        detail_type, source, detail, event_id="7bf73129-1428-4cd3-a780-95db273d1602", time="2026-11-02T10:00:00Z"
    )


POLICIES = {
    "good.yaml": None,  # the shipped governor.yaml
    "date-13-45.yaml": "pricing:\n  prices_as_of: 2026-13-45\n",
    "date-02-30.yaml": "pricing:\n  prices_as_of: 2026-02-30\n",
    "date-audit.yaml": "audit:\n  projection_start_date: 2024-00-10\n",
    "date-far.yaml": "audit:\n  projection_start_date: 9999-12-31\n",
    "date-string.yaml": "pricing:\n  prices_as_of: last tuesday\n",
    "dup-enforce.yaml": "idle:\n  enforce: false\n  enforce: true\n",
    "dup-section.yaml": "idle:\n  enforce: false\nidle:\n  window_minutes: 60\n",
    "huge-retention.yaml": "ledger:\n  retention_days: 100000000000\n",
    "huge-grace.yaml": "idle:\n  launch_grace_minutes: 99999999999999\n",
    "huge-warning.yaml": "idle:\n  warning_minutes: 99999999999999\n",
    "huge-actions.yaml": "idle:\n  max_actions_per_sweep: 1000000000000\n",
    "huge-tolerance.yaml": "idle:\n  memory_change_tolerance_mib: 1e308\n",
    "inf-tolerance.yaml": "idle:\n  memory_change_tolerance_mib: .inf\n",
    "nan-threshold.yaml": "idle:\n  gpu_utilization_threshold: .nan\n",
    "huge-key-age.yaml": "keys:\n  access_key_max_age_days: 99999999999\n  access_key_warn_days: 99999999998\n",
    "huge-unused.yaml": "keys:\n  access_key_unused_days: 99999999999\n",
    "huge-expiry.yaml": "spot:\n  checkpoint_bucket:\n    noncurrent_version_expiry_days: 99999999999\n",
    "huge-ia.yaml": "audit:\n  transition_to_infrequent_access_days: 99999999999\n",
    "huge-expire.yaml": "audit:\n  expire_after_days: 99999999999\n",
    "huge-scan.yaml": "audit:\n  bytes_scanned_cutoff_per_query: 1e30\n",
    "huge-gpus.yaml": "lifecycle:\n  prices:\n    g5.xlarge: {on_demand: 1e300, gpus: 99999999999}\n",
    "huge-bytes.yaml": "idle:\n  network_bytes_threshold: 1e400\n",
    "negative-window.yaml": "idle:\n  window_minutes: -5\n",
    "string-window.yaml": "idle:\n  window_minutes: two hours\n",
    "bool-window.yaml": "idle:\n  window_minutes: true\n",
    "typo-section.yaml": "idel:\n  enforce: true\n",
    "typo-field.yaml": "idle:\n  windw_minutes: 60\n",
    "list-top.yaml": "- idle\n- spot\n",
    "scalar-top.yaml": "42\n",
    "empty.yaml": "",  # an empty policy is every default: report-only, valid
    "tabs.yaml": "idle:\n\tenforce: true\n",
    "unclosed.yaml": "idle: {enforce: true\n",
    "deep.yaml": "a: " + "[" * 3000 + "]" * 3000 + "\n",
    "anchors.yaml": "a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
    "python-tag.yaml": "idle: !!python/object/apply:os.system ['echo pwned']\n",
    "version-2.yaml": "version: 2\n",
    "bad-cidr.yaml": "network:\n  trusted_cidrs: [not-a-cidr]\n",
    "world-cidr.yaml": "network:\n  trusted_cidrs: ['::/0']\n",
    "bad-port.yaml": "network:\n  training_ports: ['70000']\n",
    "schedule.yaml": "idle:\n  schedule: every now and then\n",
    "binary.yaml": "\x00\x01\x02idle\x00",
}

METRICS_HEADER = "timestamp,instance_id,metric,value\n"


def _metrics_rows(start: int = 1_764_583_200, minutes: int = 180, value: str = "0.5") -> str:
    return "".join(f"{start + 60 * m},i-0abc,gpu_utilization,{value}\n" for m in range(minutes))


METRICS = {
    "good.csv": METRICS_HEADER + _metrics_rows(),
    "epoch-1e20.csv": METRICS_HEADER + "1e20,i-0abc,gpu_utilization,1\n" + _metrics_rows(minutes=2),
    "epoch-huge-int.csv": METRICS_HEADER + "100000000000000000000,i-0abc,gpu_utilization,1\n",
    "year-10000.csv": METRICS_HEADER + "10000-01-01T00:00:00Z,i-0abc,gpu_utilization,1\n",
    "year-9999.csv": METRICS_HEADER + "9999-12-31T23:59:59Z,i-0abc,gpu_utilization,1\n",
    "year-0001.csv": METRICS_HEADER + "0001-01-01T00:00:00Z,i-0abc,gpu_utilization,1\n" + _metrics_rows(minutes=2),
    "epoch-ms.csv": METRICS_HEADER
    + "".join(f"{1_764_583_200_000 + 60_000 * m},i-0abc,gpu_utilization,1\n" for m in range(5)),
    "sample-2100.csv": METRICS_HEADER + _metrics_rows(minutes=30) + "4102444800,i-0abc,gpu_utilization,1\n",
    "sample-epoch0.csv": METRICS_HEADER + "0,i-0abc,gpu_utilization,1\n" + _metrics_rows(minutes=30),
    "sample-1971-2099.csv": METRICS_HEADER + "31536000,i-0abc,gpu_utilization,1\n4070908800,i-0def,gpu_utilization,1\n",
    "nan.csv": METRICS_HEADER + _metrics_rows(minutes=3, value="nan"),
    "inf.csv": METRICS_HEADER + _metrics_rows(minutes=3, value="inf"),
    "negative.csv": METRICS_HEADER + _metrics_rows(minutes=3, value="-1"),
    "huge-value.csv": METRICS_HEADER + _metrics_rows(minutes=3, value="1e400"),
    "text-value.csv": METRICS_HEADER + _metrics_rows(minutes=3, value="idle"),
    "no-header.csv": _metrics_rows(minutes=3),
    "wrong-header.csv": "time,id,name,v\n" + _metrics_rows(minutes=3),
    "three-fields.csv": METRICS_HEADER + "1764583200,i-0abc,1\n",
    "empty.csv": "",
    "header-only.csv": METRICS_HEADER,
    "unknown-metrics.csv": METRICS_HEADER + "1764583200,i-0abc,fan_speed,1\n",
    "empty-id.csv": METRICS_HEADER + "1764583200,,gpu_utilization,1\n",
    "bad-time.csv": METRICS_HEADER + "yesterday,i-0abc,gpu_utilization,1\n",
    "negative-epoch.csv": METRICS_HEADER + "-86400,i-0abc,gpu_utilization,1\n",
    "nul.csv": METRICS_HEADER + "1764583200,i-0abc\x00,gpu_utilization,1\n",
    "binary.csv": "\xff\xfe\x00garbage",
    "quote.csv": METRICS_HEADER + '"1764583200,i-0abc,gpu_utilization,1\n',
    "bom.csv": "\ufeff" + METRICS_HEADER + _metrics_rows(minutes=3),
    "tz-mixed.csv": METRICS_HEADER
    + "2026-12-01T10:00:00+14:00,i-0abc,gpu_utilization,1\n2026-12-01T10:00:00,i-0abc,gpu_utilization,1\n",
    "many-instances.csv": METRICS_HEADER
    + "".join(f"{1_764_583_200 + 60 * m},i-{n:04x},gpu_utilization,1\n" for n in range(50) for m in range(3)),
}


def _events() -> dict[str, object]:
    record = _record()
    return {
        "cloudtrail-record.json": record,
        "eventbridge-cloudtrail.json": _eventbridge("AWS API Call via CloudTrail", record),
        "cloudtrail-file.json": {"Records": [record, _record("RunInstances"), _record("DescribeInstances")]},
        "cloudtrail-file-empty.json": {"Records": []},
        "cloudtrail-file-bad.json": {"Records": "everything"},
        "cloudtrail-file-mixed.json": {"Records": [record, 42, {"eventName": 7}]},
        "rotation-half-year.json": _eventbridge(
            "AWS API Call via CloudTrail",
            _record(
                "EnableKeyRotation",
                eventSource="kms.amazonaws.com",
                requestParameters={
                    "keyId": "1234abcd-12ab-34cd-56ef-1234567890ab",
                    "rotationPeriodInDays": "half a year",
                },
            ),
            "aws.kms",
        ),
        "rotation-float.json": _record(
            "EnableKeyRotation",
            eventSource="kms.amazonaws.com",
            requestParameters={"keyId": "1234abcd-12ab-34cd-56ef-1234567890ab", "rotationPeriodInDays": 1e300},
        ),
        "rotation-list.json": _record(
            "EnableKeyRotation",
            eventSource="kms.amazonaws.com",
            requestParameters={"keyId": "1234abcd-12ab-34cd-56ef-1234567890ab", "rotationPeriodInDays": [90]},
        ),
        "time-9999.json": _record(when="9999-12-31T23:59:59Z"),
        "time-0001.json": _record(when="0001-01-01T00:00:00Z"),
        "time-garbage.json": _record(when="soon"),
        "time-number.json": _record(when=1e20),  # type: ignore[arg-type]
        "envelope-time-9999.json": {
            **_eventbridge(
                "EC2 Spot Instance Interruption Warning", {"instance-id": "i-0abc", "instance-action": "terminate"}
            ),
            "time": "9999-12-31T23:59:59Z",
        },
        "state-change-underscore.json": _eventbridge(
            "EC2 Instance State-change Notification", {"instance_id": "i-0abc", "state": "terminated"}
        ),
        "state-change-no-id.json": _eventbridge("EC2 Instance State-change Notification", {"state": "running"}),
        "spot-no-id.json": _eventbridge("EC2 Spot Instance Interruption Warning", {"instance-action": "terminate"}),
        "spot-bad-action.json": _eventbridge(
            "EC2 Spot Instance Interruption Warning", {"instance-id": "i-0abc", "instance-action": "explode"}
        ),
        "spot-id-number.json": _eventbridge("EC2 Spot Instance Interruption Warning", {"instance-id": 42}),
        "detail-list.json": _eventbridge("EC2 Instance State-change Notification", [1, 2]),
        "detail-null.json": _eventbridge("EC2 Instance State-change Notification", None),
        "unknown-detail-type.json": _eventbridge("Something Else", {}),
        "list.json": [1, 2, 3],
        "string.json": "event",
        "null.json": None,
        "deep.json": None,  # written raw below
        "empty.json": None,
        "truncated.json": None,
        "binary.json": None,
    }


def write_inputs(folder: Path) -> None:
    """Write every hostile input under ``folder`` (policies/, metrics/, events/, trails/, ledgers/)."""
    for sub in ("policies", "metrics", "events", "trails", "ledgers", "out"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for name, text in POLICIES.items():
        content = (ROOT / "governor.yaml").read_text(encoding="utf-8") if text is None else text
        (folder / "policies" / name).write_text(content, encoding="utf-8")
    for name, text in METRICS.items():
        (folder / "metrics" / name).write_text(text, encoding="utf-8", errors="surrogatepass")
    for name, event in _events().items():
        (folder / "events" / name).write_text(json.dumps(event), encoding="utf-8")
    raw = {
        "deep.json": "[" * 100_000 + "]" * 100_000,
        "empty.json": "",
        "truncated.json": json.dumps(_record())[:200],
        "binary.json": "\x00\xff\xfe",
    }
    for name, text in raw.items():
        (folder / "events" / name).write_bytes(text.encode("utf-8", errors="surrogateescape"))
    delivered = gzip.compress(json.dumps({"Records": [_record(), _record("RunInstances")]}).encode())
    (folder / "events" / "delivered.json.gz").write_bytes(delivered)
    (folder / "events" / "delivered-truncated.json.gz").write_bytes(delivered[: len(delivered) // 2])
    (folder / "events" / "delivered-binary.json.gz").write_bytes(gzip.compress(b"\xff\xfe\x00 not json"))
    trails = folder / "trails"
    good = trails / "good" / "AWSLogs" / "123456789012" / "CloudTrail" / "us-east-1" / "2026" / "11" / "02"
    good.mkdir(parents=True)
    (good / "a.json.gz").write_bytes(
        gzip.compress(json.dumps({"Records": [_record(), _record("RunInstances")]}).encode())
    )
    (trails / "empty").mkdir()
    skipped = trails / "all-skipped"
    skipped.mkdir()
    (skipped / "broken.json").write_text("{not json", encoding="utf-8")
    (skipped / "broken.json.gz").write_bytes(b"not gzip at all")
    (skipped / "records-string.json").write_text('{"Records": "x"}', encoding="utf-8")
    for name, when in (
        ("time-9999", "9999-12-31T23:59:59Z"),
        ("time-0001", "0001-01-01T00:00:00Z"),
        ("time-bad", "soon"),
    ):
        (trails / name).mkdir()
        (trails / name / "t.json").write_text(
            json.dumps({"Records": [_record(when=when), _record()]}), encoding="utf-8"
        )
    (trails / "no-records").mkdir()
    (trails / "no-records" / "t.json").write_text('{"Records": []}', encoding="utf-8")
    (trails / "deep").mkdir()
    (trails / "deep" / "t.json").write_text('{"Records": [' + "[" * 50_000 + "]" * 50_000 + "]}", encoding="utf-8")
    (trails / "wrong-types").mkdir()
    (trails / "wrong-types" / "t.json").write_text(
        json.dumps({"Records": [{"eventTime": 5, "eventName": ["x"], "requestParameters": "y"}, 7, None]}),
        encoding="utf-8",
    )
    ledgers = folder / "ledgers"
    session = {
        "kind": "session",
        "instance_id": "i-0abc",
        "instance_type": "g5.xlarge",
        "start": "2026-11-02T09:00:00Z",
    }
    lines = {
        "good.jsonl": [session],
        "deep.jsonl": None,
        "wrong-types.jsonl": [
            {"kind": "session", "instance_id": 5, "instance_type": ["g5"], "start": 7, "end": {"x": 1}},
            {"kind": "decision", "policy": "idle", "verdict": 3, "at": [], "evidence": "x", "gpus": "many"},
            {"kind": "interruption", "warned_at": 1e300, "instance_id": None},
        ],
        "times-far.jsonl": [
            {**session, "start": "0001-01-01T00:00:00Z", "end": "9999-12-31T23:59:59Z"},
            {"kind": "decision", "policy": "idle", "verdict": "act", "at": "9999-12-31T23:59:59+00:00"},
        ],
        "not-objects.jsonl": [1, "two", [3]],
        "array.json": None,
        "bad-line.jsonl": None,
        "binary.jsonl": None,
    }
    for name, items in lines.items():
        if items is not None:
            (ledgers / name).write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    (ledgers / "deep.jsonl").write_text("[" * 50_000 + "]" * 50_000 + "\n", encoding="utf-8")
    (ledgers / "deep-object.jsonl").write_text(
        '{"kind": "session", "x": ' + "[" * 5_000 + "]" * 5_000 + "}\n", encoding="utf-8"
    )
    (ledgers / "array.json").write_text(json.dumps([session, session]), encoding="utf-8")
    (ledgers / "bad-line.jsonl").write_text(json.dumps(session) + "\n{oops\n", encoding="utf-8")
    (ledgers / "binary.jsonl").write_bytes(b"\xff\xfe\x00")


# ---------------------------------------------------------------------------------------------------------------------
# The cases


def cases(folder: Path, env: dict[str, str]) -> list[Case]:
    """Every hostile invocation; ``env`` holds the queue URLs and table names the moto server answers for."""
    p, m, e, t, led, out = (str(folder / s) for s in ("policies", "metrics", "events", "trails", "ledgers", "out"))
    good_policy = f"{p}/good.yaml"
    found: list[Case] = []
    add = found.append

    # validate: every policy file; the good one passes, every other one is bad input
    for name in POLICIES:
        add(_case(f"validate {name}", ["validate", f"{p}/{name}"], OK if name in ("good.yaml", "empty.yaml") else BAD))
    for name in POLICIES:
        expect = OK if name in ("good.yaml", "empty.yaml") else BAD
        add(_case(f"validate --json {name}", ["validate", f"{p}/{name}", "--json"], expect))
    add(_case("validate missing file", ["validate", f"{p}/missing.yaml"], BAD))
    add(_case("validate a folder", ["validate", p], BAD))
    add(_case("validate /dev/null", ["validate", "/dev/null"], OK))
    add(_case("typo'd subcommand", ["valdate", good_policy], BAD))
    add(_case("no subcommand", [], BAD))
    add(_case("unknown flag", ["validate", "--strict", good_policy], BAD))

    # explain
    for name in _events():
        expect = OK if name.startswith(("cloudtrail-", "eventbridge-", "rotation-", "unknown-detail")) else BAD
        if name in ("cloudtrail-file-bad.json", "cloudtrail-file-empty.json", "cloudtrail-file-mixed.json"):
            expect = BAD
        if name in ("rotation-half-year.json", "rotation-float.json", "rotation-list.json"):
            expect = BAD
        add(_case(f"explain {name}", ["explain", f"{e}/{name}", "--policy", good_policy], expect))
        add(_case(f"explain --json {name}", ["explain", f"{e}/{name}", "--policy", good_policy, "--json"], expect))
    record = json.dumps(_record())
    add(_case("explain - (stdin)", ["explain", "-", "--policy", good_policy], OK, stdin=record))
    add(_case("explain - (stdin, empty)", ["explain", "-", "--policy", good_policy], BAD, stdin=""))
    add(
        _case(
            "explain - (stdin, trail file)",
            ["explain", "-", "--json", "--policy", good_policy],
            OK,
            stdin=json.dumps({"Records": [_record(), _record("RunInstances")]}),
        )
    )
    add(_case("explain .json.gz", ["explain", f"{e}/delivered.json.gz", "--policy", good_policy, "--json"], OK))
    for name in ("delivered-truncated.json.gz", "delivered-binary.json.gz"):
        add(_case(f"explain {name}", ["explain", f"{e}/{name}", "--policy", good_policy], BAD))
    add(_case("explain missing file", ["explain", f"{e}/missing.json", "--policy", good_policy], BAD))
    add(_case("explain a folder", ["explain", e, "--policy", good_policy], BAD))
    for name in ("date-13-45.yaml", "date-02-30.yaml", "dup-enforce.yaml", "huge-retention.yaml"):
        add(
            _case(
                f"explain --policy {name}", ["explain", f"{e}/cloudtrail-record.json", "--policy", f"{p}/{name}"], BAD
            )
        )
    add(
        _case(
            "explain | head -1",
            ["explain", f"{e}/cloudtrail-file.json", "--json", "--policy", good_policy],
            OK,
            head=True,
        )
    )

    # backtest
    good_metrics = {
        "good.csv",
        "sample-2100.csv",
        "sample-epoch0.csv",
        "sample-1971-2099.csv",
        "tz-mixed.csv",
        "many-instances.csv",
        "bom.csv",
    }
    for name in METRICS:
        expect = OK if name in good_metrics else BAD
        add(_case(f"backtest {name}", ["backtest", "--metrics", f"{m}/{name}", "--policy", good_policy], expect))
    for interval in ("99999999999999h", "0", "0m", "-5m", "59s", "1.5h", "abc", "", "15x", "1e9", "100000h", "nan"):
        add(
            _case(
                f"backtest --interval {interval!r}",
                ["backtest", "--metrics", f"{m}/good.csv", "--policy", good_policy, "--interval", interval],
                BAD,
            )
        )
    add(
        _case(
            "backtest --interval 1h",
            ["backtest", "--metrics", f"{m}/good.csv", "--policy", good_policy, "--interval", "1h"],
            OK,
        )
    )
    for name in ("date-13-45.yaml", "date-02-30.yaml", "huge-grace.yaml", "huge-warning.yaml", "nan-threshold.yaml"):
        add(
            _case(
                f"backtest --policy {name}", ["backtest", "--metrics", f"{m}/good.csv", "--policy", f"{p}/{name}"], BAD
            )
        )
    add(_case("backtest missing file", ["backtest", "--metrics", f"{m}/missing.csv", "--policy", good_policy], BAD))
    add(_case("backtest a folder", ["backtest", "--metrics", m, "--policy", good_policy], BAD))
    add(
        _case(
            "backtest | head -1",
            ["backtest", "--metrics", f"{m}/many-instances.csv", "--json", "--policy", good_policy],
            OK,
            head=True,
        )
    )

    # audit
    add(_case("audit good", ["audit", "--logs", f"{t}/good"], OK))
    add(_case("audit good --fail-on-rows", ["audit", "--logs", f"{t}/good", "--fail-on-rows"], FAILED))
    for name in ("empty", "all-skipped", "no-records"):
        add(_case(f"audit {name} --fail-on-rows", ["audit", "--logs", f"{t}/{name}", "--fail-on-rows"], BAD))
        add(_case(f"audit {name}", ["audit", "--logs", f"{t}/{name}"], OK))
    for name in ("time-9999", "time-0001", "time-bad", "deep", "wrong-types"):
        add(_case(f"audit {name}", ["audit", "--logs", f"{t}/{name}"], OK))
        add(_case(f"audit {name} --json", ["audit", "--logs", f"{t}/{name}", "--json"], OK))
    add(_case("audit missing folder", ["audit", "--logs", f"{t}/missing"], BAD))
    add(_case("audit a file", ["audit", "--logs", f"{e}/cloudtrail-record.json"], BAD))
    add(_case("audit no --logs", ["audit"], BAD))
    add(_case("audit --query bogus", ["audit", "--logs", f"{t}/good", "--query", "bogus"], BAD))
    add(_case("audit --query misspelt", ["audit", "--logs", f"{t}/good", "--query", "security_group_change"], BAD))
    for flag, value in (
        ("--start", "0001-01-01"),
        ("--start", "9999-12-31"),
        ("--end", "0001-01-01"),
        ("--start", "soon"),
        ("--start", "2026-13-45"),
        ("--end", "10000-01-01"),
        ("--start", "1e20"),
    ):
        add(_case(f"audit {flag} {value}", ["audit", "--logs", f"{t}/good", flag, value], BAD))
    add(
        _case(
            "audit --start after --end",
            ["audit", "--logs", f"{t}/good", "--start", "2026-12-01", "--end", "2026-11-01"],
            BAD,
        )
    )
    add(_case("audit | head -1", ["audit", "--logs", f"{t}/good"], OK, head=True))
    add(_case("audit --csv | head -1", ["audit", "--logs", f"{t}/good", "--csv"], OK, head=True))
    add(_case("audit --list | head -1", ["audit", "--list"], OK, head=True))
    add(_case("audit --fail-on-rows | head -1", ["audit", "--logs", f"{t}/good", "--fail-on-rows"], FAILED, head=True))

    # report
    base = ["report", "--logs", f"{t}/good", "--policy", good_policy]
    add(_case("report good", [*base, "--out", f"{out}/r-good"], OK))
    for name in (
        "deep.jsonl",
        "deep-object.jsonl",
        "not-objects.jsonl",
        "bad-line.jsonl",
        "binary.jsonl",
        "missing.jsonl",
    ):
        add(_case(f"report --ledger {name}", [*base, "--out", f"{out}/r-{name}", "--ledger", f"{led}/{name}"], BAD))
    for name in ("good.jsonl", "array.json", "wrong-types.jsonl", "times-far.jsonl"):
        expect = BAD if name in ("wrong-types.jsonl", "times-far.jsonl") else OK
        add(_case(f"report --ledger {name}", [*base, "--out", f"{out}/r-{name}", "--ledger", f"{led}/{name}"], expect))
    for flag, value in (
        ("--start", "0001-01-01"),
        ("--end", "9999-12-31"),
        ("--start", "soon"),
        ("--start", "2026-02-30"),
    ):
        add(_case(f"report {flag} {value}", [*base, "--out", f"{out}/r-x", flag, value], BAD))
    add(
        _case(
            "report --start after --end",
            [*base, "--out", f"{out}/r-x", "--start", "2026-12-01", "--end", "2026-11-01"],
            BAD,
        )
    )
    add(_case("report --out /proc/x", [*base, "--out", "/proc/x"], BAD))
    add(_case("report --out a file", [*base, "--out", good_policy], BAD))
    add(
        _case(
            "report --logs empty",
            ["report", "--logs", f"{t}/empty", "--policy", good_policy, "--out", f"{out}/r-e"],
            BAD,
        )
    )
    add(
        _case(
            "report --logs missing",
            ["report", "--logs", f"{t}/missing", "--policy", good_policy, "--out", f"{out}/r-m"],
            BAD,
        )
    )
    add(_case("report --kind yearly", [*base, "--out", f"{out}/r-y", "--kind", "yearly"], BAD))
    add(
        _case(
            "report --policy date",
            ["report", "--logs", f"{t}/good", "--policy", f"{p}/date-02-30.yaml", "--out", f"{out}/r-d"],
            BAD,
        )
    )

    # demo: bad flags only (a valid demo takes minutes); the checks must come before any emulator or synth
    demo = ["demo", "--skip-synth", "--policy", good_policy]
    for flags in (
        ["--hours", "-1"],
        ["--hours", "nan"],
        ["--hours", "inf"],
        ["--hours", "0"],
        ["--hours", "1e9"],
        ["--port", "99999"],
        ["--port", "-1"],
        ["--port", "http"],
        ["--out", "/proc/x"],
        ["--out", good_policy],
        ["--instances", "0"],
        ["--instances", "-3"],
        ["--instances", "1000000000"],
        ["--instances", "2.5"],
    ):
        tail = [] if "--out" in flags else ["--out", f"{out}/demo"]
        add(_case(f"demo {' '.join(flags)}", [*demo, *flags, *tail], BAD))
    for name in ("date-13-45.yaml", "date-02-30.yaml", "dup-enforce.yaml", "missing.yaml"):
        add(
            _case(
                f"demo --policy {name}",
                ["demo", "--skip-synth", "--policy", f"{p}/{name}", "--out", f"{out}/demo"],
                BAD,
            )
        )

    # ledger (moto server)
    table = env["GOVERNOR_HOSTILE_TABLE"]
    lx = ["ledger", "export", "--table", table, "--region", "us-east-1"]
    add(_case("ledger export good", [*lx, "--out", f"{out}/ledger.jsonl"], OK))
    add(_case("ledger export --kind bogus", [*lx, "--out", f"{out}/l.jsonl", "--kind", "bogus"], BAD))
    add(_case("ledger export --kind decison", [*lx, "--out", f"{out}/l.jsonl", "--kind", "decison"], BAD))
    add(_case("ledger export --kind interruption", [*lx, "--out", f"{out}/l.jsonl", "--kind", "interruption"], OK))
    for since in ("soon", "0001-01-01", "9999-12-31", "2026-13-45", "10000-01-01"):
        add(_case(f"ledger export --since {since}", [*lx, "--out", f"{out}/l.jsonl", "--since", since], BAD))
    add(_case("ledger export --out /proc/x/y", [*lx, "--out", "/proc/x/y"], BAD))
    add(_case("ledger export --out a folder", [*lx, "--out", out], BAD))
    add(
        _case(
            "ledger export missing table",
            ["ledger", "export", "--table", "nope", "--region", "us-east-1", "--out", f"{out}/l.jsonl"],
            BAD,
        )
    )
    add(
        _case(
            "ledger export bad table name",
            ["ledger", "export", "--table", "bad name!", "--region", "us-east-1", "--out", f"{out}/l.jsonl"],
            BAD,
        )
    )
    ix = ["--table", table, "--region", "us-east-1"]
    add(_case("idle status --json", ["idle", "status", *ix, "--json"], OK))
    add(_case("idle rearm --dry-run", ["idle", "rearm", *ix, "--dry-run"], OK))
    add(_case("idle status missing table", ["idle", "status", "--table", "nope", "--region", "us-east-1"], BAD))
    add(_case("idle status bad region", ["idle", "status", "--table", table, "--region", "moon-1"], BAD))
    add(_case("ledger no action", ["ledger"], BAD))
    add(_case("ledger exprt", ["ledger", "exprt"], BAD))

    # dlq (moto server; the big queue holds 25 messages)
    queue = env["GOVERNOR_HOSTILE_QUEUE"]
    dl = ["dlq", "list", "spot", "--region", "us-east-1", "--queue-url", queue]
    add(_case("dlq list 25 messages", dl, OK, stdout_has="25 event(s)"))
    add(_case("dlq list --json | head -1", [*dl, "--json"], OK, head=True))
    dry = ["dlq", "replay", "spot", "--region", "us-east-1", "--queue-url", queue, "--dry-run"]
    add(_case("dlq replay --dry-run 25 messages", dry, OK, stdout_has="dry run: would re-drive 25 event(s)"))
    add(_case("dlq list --limit 0", [*dl, "--limit", "0"], BAD))
    add(_case("dlq list --limit -1", [*dl, "--limit", "-1"], BAD))
    add(_case("dlq list --limit x", [*dl, "--limit", "x"], BAD))
    add(
        _case(
            "dlq list missing queue",
            ["dlq", "list", "spot", "--region", "us-east-1", "--queue-url", queue + "-missing"],
            BAD,
        )
    )
    add(_case("dlq list bad url", ["dlq", "list", "spot", "--region", "us-east-1", "--queue-url", "not a url"], BAD))
    add(_case("dlq list unknown function", ["dlq", "list", "spto", "--region", "us-east-1"], BAD))
    add(_case("dlq replay unknown function", ["dlq", "replay", "spto", "--region", "us-east-1"], BAD))
    add(_case("dlq no action", ["dlq"], BAD))
    add(_case("dlq lst", ["dlq", "lst", "spot"], BAD))
    return found


# ---------------------------------------------------------------------------------------------------------------------
# Running them


@dataclass
class Outcome:
    case: Case
    code: int | None  # None: hung
    stdout: str
    stderr: str
    seconds: float

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stderr

    @property
    def problems(self) -> list[str]:
        found = []
        if self.code is None:
            found.append("hang")
        elif self.traceback:
            found.append("traceback")
        elif self.code not in self.case.expect:
            found.append(f"exit {self.code}, expected {'/'.join(map(str, sorted(self.case.expect)))}")
        if self.code == 2 and not self.case.head:
            lines = [
                line for line in self.stderr.splitlines() if line.strip() and not line.startswith("governor: skipped")
            ]
            if len(lines) != 1 and not self.stdout.startswith("usage:"):
                found.append(f"{len(lines)} lines on stderr")
        if self.case.stdout_has and self.code == 0 and self.case.stdout_has not in self.stdout:
            found.append(f"output lacks {self.case.stdout_has!r}")
        return found


def run_case(case: Case, env: dict[str, str], timeout: float, entry: str = "governor_cli") -> Outcome:
    command = [sys.executable, "-m", entry, *case.argv]
    began = time.monotonic()
    try:
        if case.head:
            shell = " ".join(_quote(part) for part in command) + " | head -1; exit ${PIPESTATUS[0]}"
            done = subprocess.run(
                ["bash", "-c", shell],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                input=case.stdin,
                cwd=ROOT,
                check=False,
            )
        else:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                input=case.stdin,
                cwd=ROOT,
                check=False,
                errors="replace",
            )
    except subprocess.TimeoutExpired as expired:
        return Outcome(case, None, _text(expired.stdout), _text(expired.stderr), time.monotonic() - began)
    return Outcome(case, done.returncode, done.stdout, done.stderr, time.monotonic() - began)


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value or "")


def _quote(part: str) -> str:
    import shlex

    return shlex.quote(part)


def seed_aws(endpoint: str | None = None) -> dict[str, str]:
    """A ledger table (one session, one decision) and a DLQ of 25 messages; returns their names for :func:`cases`.

    ``endpoint`` is the moto server's URL, or None inside ``mock_aws`` (the in-process regression test).
    """
    import boto3

    session = boto3.session.Session(
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # noqa: S106 - the local emulator's dummy credentials
        region_name="us-east-1",
    )
    ddb = session.client("dynamodb", endpoint_url=endpoint)
    from governor_cli.demo.bootstrap import create_ledger_table

    create_ledger_table("hostile-ledger", dynamodb=ddb)
    for kind, key in (("session", "i-0abc#1"), ("decision", "idle#e1")):
        ddb.put_item(
            TableName="hostile-ledger",
            Item={
                "pk": {"S": f"{kind}#{key}"},
                "sk": {"S": "item"},
                "kind": {"S": kind},
                "at": {"S": "2026-11-02T10:00:00+00:00"},
            },
        )
    sqs = session.client("sqs", endpoint_url=endpoint)
    url = sqs.create_queue(QueueName="hostile-dlq")["QueueUrl"]
    for n in range(25):
        event = _eventbridge("EC2 Spot Instance Interruption Warning", {"instance-id": f"i-{n:017x}"})
        event["id"] = f"event-{n}"
        sqs.send_message(
            QueueUrl=url,
            MessageBody=json.dumps(event),
            MessageAttributes={"ErrorMessage": {"DataType": "String", "StringValue": "fuzz"}},
        )
    return {"GOVERNOR_HOSTILE_TABLE": "hostile-ledger", "GOVERNOR_HOSTILE_QUEUE": url}


def _moto() -> Iterator[dict[str, str]]:
    """A moto server seeded by :func:`seed_aws`, and the environment that points the command at it."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PYTHONDONTWRITEBYTECODE": "1",
        **seed_aws(endpoint),
    }
    try:
        yield env
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a case counts as a hang")
    parser.add_argument("--only", help="run only cases whose name contains this")
    parser.add_argument("--verbose", action="store_true", help="print every case, not only the failing ones")
    parser.add_argument("--source", help="run the governor package from this checkout instead (e.g. an older commit)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="governor-hostile-") as scratch:
        folder = Path(scratch)
        write_inputs(folder)
        moto = _moto()
        env = next(moto)
        entry = "governor_cli"
        if args.source:
            source = Path(args.source).resolve()
            env["PYTHONPATH"] = os.pathsep.join(str(source / part) for part in ("lambdas", "cli"))
            if not (source / "cli" / "governor_cli").is_dir():
                entry = "governor"  # a checkout from before the CLI left the Lambda package
        try:
            selected = [c for c in cases(folder, env) if not args.only or args.only in c.name]
            began = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
                outcomes = list(pool.map(lambda c: run_case(c, env, args.timeout, entry), selected))
            elapsed = time.monotonic() - began
        finally:
            next(moto, None)
    codes = Counter("hang" if o.code is None else str(o.code) for o in outcomes)
    bad = [o for o in outcomes if o.problems]
    for outcome in outcomes:
        if outcome.problems or args.verbose:
            last = (outcome.stderr.strip().splitlines() or [""])[-1][:160]
            print(
                f"{'FAIL' if outcome.problems else 'ok  '} {outcome.case.name}: {', '.join(outcome.problems) or outcome.code}  | {last}"
            )
    subcommands = Counter(o.case.argv[0] if o.case.argv else "-" for o in outcomes)
    print(
        f"\n{len(outcomes)} invocations ({', '.join(f'{k} {v}' for k, v in sorted(subcommands.items()))}) in {elapsed:.0f} s: "
        f"{sum(o.traceback for o in outcomes)} tracebacks, {codes.get('hang', 0)} hangs, "
        f"exit codes {', '.join(f'{k}: {v}' for k, v in sorted(codes.items()))}; "
        f"{len(bad)} break the contract"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
