"""The ``governor`` command's rough edges (issues 46.6 and 48.10), through ``main()`` as a user runs it: a half-deployed
stack, missing credentials and region, ``--json`` on ``validate`` and ``idle status``, ``--dry-run`` on ``idle rearm``
and ``dlq replay``, and a CloudTrail file as delivered (``.json.gz``) for ``explain``.

``run`` stands for the terminal: an exception that escapes ``main()`` is what Python prints, a traceback and exit 1.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from governor.adapters.ledger import DynamoLedger
from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND, Breaker, read_breaker, write_breaker
from governor_cli.commands import status
from governor_cli.demo.bootstrap import create_ledger_table
from governor_cli.main import main
from tests.conftest import ROOT
from tests.reliability.test_dlq import SPOT_EVENT, world  # noqa: F401 - the fixture

REGION = "us-east-1"
POLICY = str(ROOT / "governor.yaml")
TABLE = "governor-ledger"


@pytest.fixture(autouse=True)
def fresh_clients() -> Iterator[None]:
    """The runtime's shared clients keep the credentials and region they were built with: each test starts and ends
    without them, so a test without credentials leaves no credential-less client to the next."""
    from governor.adapters.aws import client

    client.cache_clear()
    yield
    client.cache_clear()


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``governor ARGV`` as a terminal shows it: exit code, stdout, stderr (a traceback when an exception escapes)."""
    try:
        code = main(list(argv))
    except SystemExit as exited:  # argparse's own exit (an unknown flag: 2)
        code = exited.code if isinstance(exited.code, int) else 2
    except Exception:
        traceback.print_exc()
        code = 1
    out, err = capsys.readouterr()
    return code, out, err


def one_line_exit_2(code: int, err: str) -> str:
    assert code == 2 and err.count("\n") == 1 and err.startswith("governor: ") and "Traceback" not in err, err
    return err.removeprefix("governor: ").rstrip("\n")


# --- governor status --stack on a half-deployed stack (issue 46.6) -------------------------------------------------
def test_a_half_deployed_and_rolled_back_stack_shows_every_resource_and_says_which_are_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While CloudFormation creates a function it lists it without a physical id (a KeyError traceback); after a
    rollback one function and one queue are gone (each hid its whole area as 'cannot read', and with it a parked
    Spot event). Each resource is now its own line."""
    with mock_aws():
        template = {
            "Resources": {
                "SpotDlq": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "Gov-SpotDlq"}},
                "NetworkDlq": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "Gov-NetworkDlq"}},
            }
        }
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName="Gov", TemplateBody=json.dumps(template)
        )
        sqs = boto3.client("sqs", region_name=REGION)
        spot = sqs.get_queue_url(QueueName="Gov-SpotDlq")["QueueUrl"]
        sqs.send_message(QueueUrl=spot, MessageBody=json.dumps(SPOT_EVENT))
        sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName="Gov-NetworkDlq")["QueueUrl"])
        listed = status._resources

        def half_deployed(aws: Any, stack: str) -> list[dict[str, Any]]:
            return [
                *listed(aws, stack),
                {"LogicalResourceId": "IdleFunction", "ResourceType": "AWS::Lambda::Function",
                 "ResourceStatus": "CREATE_IN_PROGRESS"},
                {"LogicalResourceId": "SpotFunction", "ResourceType": "AWS::Lambda::Function",
                 "PhysicalResourceId": "Gov-SpotFunction-gone", "ResourceStatus": "UPDATE_COMPLETE"},
                {"LogicalResourceId": "ReportsDaily", "ResourceType": "AWS::Scheduler::Schedule",
                 "ResourceStatus": "CREATE_FAILED", "ResourceStatusReason": "Resource creation cancelled"},
            ]  # fmt: skip

        monkeypatch.setattr(status, "_resources", half_deployed)
        code, out, err = run(["status", "--stack", "Gov", "--region", REGION, "--policy", POLICY], capsys)
    assert "Traceback" not in err and err == ""
    assert code == 1
    lines = out.splitlines()
    assert "DEGRADED function   IdleFunction: not created (CREATE_IN_PROGRESS)" in lines
    assert any(
        line.startswith("DEGRADED function   Gov-SpotFunction-gone: missing (ResourceNotFound") for line in lines
    )
    assert "DEGRADED schedule   ReportsDaily: not created (CREATE_FAILED: Resource creation cancelled)" in lines
    assert any(line.startswith("DEGRADED dlq        Gov-SpotDlq: 1 message waiting") for line in lines)
    assert any(line.startswith("DEGRADED dlq        Gov-NetworkDlq: missing (") for line in lines)
    assert not [line for line in lines if "cannot read" in line and "dlq" in line]


# --- one wording for missing credentials, a region always resolved (issue 48.10) -----------------------------------
AWS_COMMANDS = [
    ["status", "--stack", "Gov", "--policy", POLICY],
    ["status", "--table", TABLE, "--policy", POLICY],
    ["idle", "status", "--table", TABLE],
    ["idle", "rearm", "--table", TABLE],
    ["ledger", "export", "--table", TABLE, "--out", "OUT"],
    ["dlq", "list", "spot"],
    ["dlq", "replay", "spot"],
]


def _no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)


def test_every_command_says_missing_credentials_in_the_same_words(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_credentials(monkeypatch, tmp_path)
    said = set()
    for argv in AWS_COMMANDS:
        argv = [str(tmp_path / "out.jsonl") if arg == "OUT" else arg for arg in argv]
        code, _, err = run([*argv, "--region", REGION], capsys)
        said.add(one_line_exit_2(code, err))
    assert len(said) == 1, said
    (line,) = said
    assert line.startswith("no AWS credentials:") and "AWS_PROFILE" in line and "AWS_ACCESS_KEY_ID" in line


def test_without_a_region_every_command_stops_with_one_line_naming_what_to_set(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``status --stack`` printed 'stack Gov in None: ...'; now no command calls AWS without a region."""
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    for argv in AWS_COMMANDS:
        argv = [str(tmp_path / "out.jsonl") if arg == "OUT" else arg for arg in argv]
        code, _, err = run(argv, capsys)
        line = one_line_exit_2(code, err)
        assert line.startswith("no AWS region: pass --region NAME"), (argv, line)
        assert "None" not in line


def test_a_region_from_the_profile_is_used(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    config = tmp_path / "config"
    config.write_text("[default]\nregion = eu-west-1\n", encoding="utf-8")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    with mock_aws():
        code, _, err = run(["status", "--stack", "Nope", "--policy", POLICY], capsys)
    assert one_line_exit_2(code, err).startswith("stack Nope in eu-west-1: ")


# --- --json on validate and idle status, --dry-run on idle rearm and dlq replay -----------------------------------
def test_validate_answers_in_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(["validate", POLICY, "--json"], capsys)
    assert code == 0
    assert json.loads(out) == {
        "file": POLICY,
        "valid": True,
        "enforcing": [],
        "delivering": ["notifications", "reports"],  # the shipped policy delivers its findings and reports
        "warnings": [],
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text("idle:\n  enforec: true\n", encoding="utf-8")
    code, out, err = run(["validate", str(bad), "--json"], capsys)
    assert "idle.enforec" in one_line_exit_2(code, err)
    answer = json.loads(out)
    assert answer["valid"] is False and "idle.enforec" in answer["error"]


def _tripped(ledger: DynamoLedger) -> None:
    _, version = read_breaker(ledger)
    held = frozenset({"i-0aaa", "i-0bbb"})
    start = dt.datetime(2026, 11, 2, 9, tzinfo=dt.UTC)
    assert write_breaker(ledger, Breaker(tripped_at=start, anomaly_start=start, held=held, signature="zero"), version)


def test_idle_status_in_json_and_a_dry_run_rearm_that_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with mock_aws():
        create_ledger_table(TABLE)
        ledger = DynamoLedger(TABLE, region=REGION)
        _tripped(ledger)
        code, out, _ = run(["idle", "status", "--table", TABLE, "--region", REGION, "--json"], capsys)
        assert code == 0
        shown = json.loads(out)
        assert shown["open"] is True and shown["held"] == ["i-0aaa", "i-0bbb"] and shown["signature"] == "zero"
        assert shown["tripped_at"] == "2026-11-02T09:00:00+00:00"
        before = ledger.get_item(BREAKER_KIND, BREAKER_KEY)
        code, out, _ = run(["idle", "rearm", "--table", TABLE, "--region", REGION, "--dry-run"], capsys)
        assert code == 0 and out.startswith("dry run: a re-arm would release 2 instances (i-0aaa, i-0bbb)")
        assert ledger.get_item(BREAKER_KIND, BREAKER_KEY) == before  # nothing written
        code, out, _ = run(["idle", "rearm", "--table", TABLE, "--region", REGION], capsys)
        assert code == 0 and out.startswith("circuit breaker re-armed: released 2 instances")
        assert not Breaker.from_item(ledger.get_item(BREAKER_KIND, BREAKER_KEY)).open


def test_a_dry_run_replay_invokes_and_deletes_nothing(
    world: dict[str, Any],  # noqa: F811 - the fixture
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(["dlq", "replay", "spot", "--region", REGION, "--dry-run"], capsys)
    assert code == 0
    assert out.count("would be re-driven") == 3
    assert out.rstrip().endswith("dry run: would re-drive 3 event(s) to GpuFleetGovernor-SpotFunction1A2B3C; "
                                 "nothing invoked or deleted")  # fmt: skip
    code, out, _ = run(["dlq", "list", "spot", "--region", REGION], capsys)
    assert code == 0 and out.startswith("3 event(s)")  # all still parked, and visible


# --- explain reads a CloudTrail file as delivered ------------------------------------------------------------------
def test_explain_reads_a_delivered_json_gz_trail_file_one_result_per_record(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    records = [
        {
            "eventVersion": "1.09",
            "eventTime": "2026-11-02T10:00:00Z",
            "eventSource": "ec2.amazonaws.com",
            "eventName": "DescribeInstances",
            "eventID": f"e-{n}",
            "awsRegion": REGION,
            "recipientAccountId": "123456789012",
            "userIdentity": {"type": "IAMUser", "arn": "arn:aws:iam::123456789012:user/ana"},
        }
        for n in range(3)
    ]
    path = tmp_path / "123456789012_CloudTrail_us-east-1_20261102T1000Z_abc.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump({"Records": records}, handle)
    code, out, err = run(["explain", str(path), "--policy", POLICY, "--json"], capsys)
    assert code == 0, err
    results = json.loads(out)
    assert [r["event"]["id"] for r in results] == ["e-0", "e-1", "e-2"]  # one object per record, in file order
    code, out, _ = run(["explain", str(path), "--policy", POLICY], capsys)
    assert code == 0 and out.rstrip().endswith("3 records: 3 IGNORED")
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(gzip.compress(b'{"Records": []}')[:12])
    code, _, err = run(["explain", str(broken), "--policy", POLICY], capsys)
    assert str(broken) in one_line_exit_2(code, err)


def test_explain_stops_at_its_size_bound_when_decompressing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A small file that decompresses to more than the bound (256 MiB; 1 KiB here) is refused, never read whole."""
    from governor_cli.commands import explain

    monkeypatch.setattr(explain, "MAX_EVENT_BYTES", 1024)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * 10_000))
    code, _, err = run(["explain", str(bomb), "--policy", POLICY], capsys)
    assert "once decompressed" in one_line_exit_2(code, err)
