"""Recognise secret-looking values in text (templates, logs): the things that must live in Secrets Manager only."""

from __future__ import annotations

import re
from dataclasses import dataclass

PATTERNS: dict[str, re.Pattern[str]] = {
    "AWS access key id": re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA)[0-9A-Z]{16}\b"),
    "AWS secret access key": re.compile(
        r"(?i)aws.{0,20}?(?:secret|private).{0,20}?['\"=:\s]\s*['\"]?[A-Za-z0-9/+]{40}\b"
    ),
    "Slack webhook URL": re.compile(
        r"https://hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]+"
    ),
    "Slack token": re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    "webhook URL with a token": re.compile(
        r"https://[^\s\"']*(?:webhook|hooks)[^\s\"']*[?&/](?:token|key|sig)=?[^\s\"'&]{16,}"
    ),
    "private key": re.compile(r"-----BEGIN (?:RSA |EC |OPENSSH |DSA |ENCRYPTED )?PRIVATE KEY-----"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),
}


@dataclass(frozen=True)
class SecretHit:
    kind: str
    excerpt: str


def find_secrets(text: str) -> list[SecretHit]:
    """Every secret-looking value in ``text``, with a masked excerpt safe to print in a test failure."""
    hits = []
    for kind, pattern in PATTERNS.items():
        for match in pattern.finditer(text):
            value = match.group(0)
            hits.append(SecretHit(kind, value[:12] + "..." if len(value) > 12 else value))
    return hits
