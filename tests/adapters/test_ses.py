"""Email through SESv2 on moto: the MIME structure a mail client sees (text + HTML, inline chart, CSV attachments)."""

from __future__ import annotations

import email
from email.message import Message

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ses import ses_backends

from governor.adapters.ses import Attachment, SesMailer

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def _sent() -> Message:
    messages = ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].sent_messages
    return email.message_from_string(messages[-1].raw_data)


def _tree(part: Message, depth: int = 0) -> list[str]:
    lines = ["  " * depth + part.get_content_type()]
    if part.is_multipart():
        for child in part.get_payload():  # type: ignore[union-attr]
            lines += _tree(child, depth + 1)
    return lines


@mock_aws
def test_report_email_is_mixed_with_alternative_text_and_html_inline_chart_and_csvs() -> None:
    boto3.client("sesv2", region_name="us-east-1").create_email_identity(EmailIdentity="governor@example.com")
    mailer = SesMailer("governor@example.com", "us-east-1")
    message_id = mailer.send(
        ["lead@example.com", "ops@example.com"],
        "GPU Fleet Governor weekly report",
        "<html><body><h1>Report</h1><img src='cid:chart'></body></html>",
        "Report\nGPU-hours 12.0\n",
        [
            Attachment("chart.png", PNG, "image/png", inline_cid="chart"),
            Attachment("gpu_hours_by_team.csv", b"team,gpu_hours\nvision,12.0\n"),
            Attachment("security_world_open_ingress.csv", b"eventtime,groupid\n"),
        ],
    )
    assert message_id
    sent = _sent()
    assert _tree(sent) == [
        "multipart/mixed",
        "  multipart/alternative",
        "    text/plain",
        "    multipart/related",
        "      text/html",
        "      image/png",
        "  text/csv",
        "  text/csv",
    ]
    assert sent["Subject"] == "GPU Fleet Governor weekly report"
    assert "lead@example.com" in sent["To"] and "ops@example.com" in sent["To"]
    parts = list(sent.walk())
    image = next(p for p in parts if p.get_content_type() == "image/png")
    assert image["Content-ID"] == "<chart>" and image.get_payload(decode=True) == PNG
    text = next(p for p in parts if p.get_content_type() == "text/plain")
    assert "GPU-hours 12.0" in text.get_payload(decode=True).decode()  # type: ignore[union-attr]
    csvs = {p.get_filename(): p.get_payload(decode=True) for p in parts if p.get_content_type() == "text/csv"}
    assert csvs["gpu_hours_by_team.csv"] == b"team,gpu_hours\nvision,12.0\n"
    assert "security_world_open_ingress.csv" in csvs


@mock_aws
def test_finding_email_without_attachments_is_just_text_and_html() -> None:
    boto3.client("sesv2", region_name="us-east-1").create_email_identity(EmailIdentity="governor@example.com")
    SesMailer("governor@example.com", "us-east-1").send(["a@example.com"], "subject", "<p>hi</p>", "hi")
    assert _tree(_sent()) == ["multipart/alternative", "  text/plain", "  text/html"]


@mock_aws
def test_an_unverified_sender_is_refused_by_ses() -> None:
    with pytest.raises(ClientError, match="MessageRejected"):
        SesMailer("nobody@example.com", "us-east-1").send(["a@example.com"], "s", "<p>x</p>", "x")
