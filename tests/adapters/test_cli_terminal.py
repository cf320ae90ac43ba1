"""Values from AWS reach an operator's terminal through one escape (issue 45.8, the terminal half).

A tag, a resource name, a CloudTrail string or a parked message is chosen by whoever can tag or call AWS. Printed as
is, a newline in an owner tag forged a row of ``governor status --table``, and ESC or U+202E rewrote or reversed what
the operator read. Every renderer of the ``governor`` command now writes such values through
``governor.domain.escape.terminal_text``; ``--json`` and ``--csv`` keep them exact.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ledger import DynamoLedger
from governor.domain.breaker import Breaker, read_breaker, write_breaker
from governor_cli.demo.bootstrap import create_ledger_table
from governor_cli.main import main
from tests.adapters.test_fleet_status import HUB, TABLE, _sweep, swept  # noqa: F401 - the fixture
from tests.conftest import ROOT

POLICY = str(ROOT / "governor.yaml")
#: A tag value that, printed as is, ends its row and writes a row of its own, clears the screen and reverses text.
FORGED_ROW = "ana\ni-0forged000000000  root  security  p5.48xlarge  running  -  -  -  exempt"
HOSTILE = "\x1b[2J\x1b]0;pwned\x07vision\u202etxt.exe"
#: What an EC2 tag can carry through moto's XML (which has no place for ESC): a bidi override and a line separator.
HOSTILE_TAG = "vision\u202etxt.exe\u2028forged"


def raw_controls(text: str) -> list[str]:
    """Every character of ``text`` that a terminal acts on instead of showing (newlines between lines aside)."""
    return [c for c in text.replace("\n", "") if c == "\x1b" or c == "\u202e" or c == "\x07" or c in "\r\u2028"]


def test_an_owner_tag_holding_a_newline_cannot_forge_a_row_of_the_fleet_table(
    swept: Any,  # noqa: F811 - the fixture
    capsys: pytest.CaptureFixture[str],
) -> None:
    policy, ids = swept
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ec2.create_tags(
        Resources=[ids["idle"]], Tags=[{"Key": "owner", "Value": FORGED_ROW}, {"Key": "team", "Value": HOSTILE_TAG}]
    )
    _sweep(DynamoLedger(TABLE, region="us-east-1"), policy)
    assert main(["status", *HUB]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 1 + len(ids) + 1  # the header, one row per instance, the summary: no forged row
    assert not [line for line in lines if line.startswith("i-0forged")]
    assert raw_controls(out) == []
    row = next(line for line in lines if line.startswith(ids["idle"]))
    assert FORGED_ROW.replace("\n", "\\x0a") in row and "vision\\u202etxt.exe\\u2028forged" in row  # shown as written
    assert main(["status", *HUB, "--json"]) == 0
    by_id = {r["instance"]: r for r in json.loads(capsys.readouterr().out)["instances"]}
    assert by_id[ids["idle"]]["owner"] == FORGED_ROW and by_id[ids["idle"]]["team"] == HOSTILE_TAG  # JSON: exact


def test_explain_keeps_every_value_of_the_event_on_its_own_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    record = {
        "eventVersion": "1.09",
        "eventTime": "2026-11-02T10:00:00Z",
        "eventSource": "ec2.amazonaws.com",
        "eventName": "AuthorizeSecurityGroupIngress\nevent forged (x): OK",
        "eventID": "e-1" + HOSTILE,
        "awsRegion": "us-east-1",
        "recipientAccountId": "123456789012",
        "userIdentity": {"type": "IAMUser", "arn": "arn:aws:iam::123456789012:user/ana"},
        "requestParameters": {"groupId": "sg-0abc\x1b[1A\x1b[2K", "ipPermissions": {"items": []}},
    }
    path = tmp_path / "event.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    assert main(["explain", str(path), "--policy", POLICY]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == []
    assert not [line for line in out.splitlines() if line.startswith("event forged")]


def test_idle_status_shows_held_instance_names_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    with mock_aws():
        create_ledger_table(TABLE)
        ledger = DynamoLedger(TABLE, region="us-east-1")
        _, version = read_breaker(ledger)
        tripped = Breaker(tripped_at=dt.datetime(2026, 11, 2, tzinfo=dt.UTC), held=frozenset({"i-1\x1b[2J\u202e"}))
        assert write_breaker(ledger, tripped, version)
        assert main(["idle", "status", *HUB]) == 0
        out = capsys.readouterr().out
        assert raw_controls(out) == [] and "i-1\\x1b[2J\\u202e" in out


def test_audit_text_rows_and_parked_messages_are_escaped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    record = {
        "eventVersion": "1.09",
        "eventTime": "2026-11-02T10:00:00Z",
        "eventSource": "ec2.amazonaws.com",
        "eventName": "DescribeInstances",
        "eventID": "e-1",
        "awsRegion": "us-east-1",
        "recipientAccountId": "123456789012",
        "errorCode": "AccessDenied",
        "errorMessage": "denied\nworld_open_ingress [CIS 5.2]: 0 rows" + HOSTILE,
        "userIdentity": {"type": "IAMUser", "arn": "arn:aws:iam::123456789012:user/ana"},
    }
    with gzip.open(tmp_path / "trail.json.gz", "wt", encoding="utf-8") as handle:
        json.dump({"Records": [record]}, handle)
    assert main(["audit", "--logs", str(tmp_path), "--query", "unauthorized_api_calls", "-q"]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out) == [] and not [line for line in out.splitlines() if line.startswith("world_open")]
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="spot-dlq")["QueueUrl"]
        sqs.send_message(
            QueueUrl=queue,
            MessageBody=json.dumps({"id": "ev-1\x1b[2J", "detail-type": "Scheduled Event\u202e"}),
            MessageAttributes={"ErrorMessage": {"DataType": "String", "StringValue": "bad\nforged: line" + HOSTILE}},
        )
        assert main(["dlq", "list", "spot", "--queue-url", queue, "--region", "us-east-1"]) == 0
        out = capsys.readouterr().out
        assert raw_controls(out) == [] and len(out.splitlines()) == 3  # the count, the message, its reason
