"""The report email as a mailbox receives it from SES (moto): one message within 60 KB, tables zipped (issue 48)."""

from __future__ import annotations

import email
import io
import zipfile

import boto3
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ses import ses_backends

from governor.adapters.delivery import AwsOutbox
from governor.policy import parse_policy
from governor.report.handler import Adapters, handle
from governor.runtime import Runtime
from governor_cli.testing.memory import MemoryDeadLetters, MemoryLedger, MemorySink
from tests.unit.test_report import sample_ledger
from tests.unit.test_report_handler import RUN_AT, FakeArchive, FakeAthena, FakeChart, scheduled

MAX_EMAIL_BYTES = 60 * 1024  # issue 48: what a mailbox gets, attachments and encoding included


def _launches(count: int) -> list[dict[str, str]]:
    """A busy day's GPU launches, as the audit query returns them: the table that made the email grow with the fleet."""
    return [
        {
            "eventtime": f"2023-07-10T{n % 24:02d}:{n % 60:02d}:00Z",
            "useridentity_arn": f"arn:aws:sts::123456789012:assumed-role/ml-engineer/user{n}@corp.example",
            "instancetype": "p4d.24xlarge" if n % 3 else "g5.12xlarge",
            "instanceid": f"i-{n:017x}",
            "sourceipaddress": f"10.0.{n % 256}.{(n * 7) % 256}",
            "awsregion": "us-east-1",
        }
        for n in range(count)
    ]


@mock_aws
def test_the_sent_report_email_is_within_60_kb_with_every_table_in_one_zip() -> None:
    sender = "governor@example.com"
    boto3.client("sesv2", region_name="us-east-1").create_email_identity(EmailIdentity=sender)
    policy = parse_policy(
        {
            "reports": {"enforce": True, "email_recipients": ["lead@example.com"]},
            "notifications": {"email_sender": sender},
        }
    )
    ledger = MemoryLedger()
    for n, item in enumerate(sample_ledger()):
        ledger.put_item(item["kind"], f"k{n}", item)
    runtime = Runtime(
        policy=policy, ledger=ledger, sink=MemorySink(), dead_letters=MemoryDeadLetters(), region="us-east-1"
    )
    aws = Adapters(
        queries=FakeAthena({"gpu_instance_launches": _launches(150)}),
        chart=FakeChart(),
        archive=FakeArchive(),
        outbox=AwsOutbox("us-east-1", sender),
    )

    result = handle(scheduled(), runtime, aws, RUN_AT)

    assert "email" in result["sent"]
    (sent,) = ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].sent_messages
    assert len(sent.raw_data.encode()) <= MAX_EMAIL_BYTES
    message = email.message_from_string(sent.raw_data)
    attached = [p for p in message.walk() if p.get_filename() and not p.get("Content-ID")]
    assert [p.get_filename() for p in attached] == ["tables.zip"]
    payload = attached[0].get_payload(decode=True)
    assert isinstance(payload, bytes)
    names = zipfile.ZipFile(io.BytesIO(payload)).namelist()
    assert {"findings.csv", "security_gpu_instance_launches.csv", "gpu_hours_by_team.csv"} <= set(names)
    html = next(p for p in message.walk() if p.get_content_type() == "text/html").get_payload(decode=True)
    assert isinstance(html, bytes) and b"attached tables.zip" in html
