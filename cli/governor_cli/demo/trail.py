"""CloudTrail records of what happens in the simulated account, written in the ``AWSLogs/...`` layout.

The demo builds each API call once as a CloudTrail record: it is written to disk for ``governor audit`` and wrapped
in an EventBridge envelope for the handlers, exactly as AWS delivers it.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from governor_cli.testing import events

ACCOUNT = "123456789012"


@dataclass
class Principal:
    """Who makes a call: an IAM user or an assumed-role session."""

    name: str
    kind: str = "IAMUser"
    role: str | None = None

    def identity(self, account: str) -> dict[str, Any]:
        if self.kind == "AssumedRole" and self.role:
            return {
                "type": "AssumedRole",
                "principalId": f"AROAEXAMPLE:{self.name}",
                "arn": f"arn:aws:sts::{account}:assumed-role/{self.role}/{self.name}",
                "accountId": account,
                "sessionContext": {
                    "sessionIssuer": {
                        "type": "Role",
                        "principalId": "AROAEXAMPLE",
                        "arn": f"arn:aws:iam::{account}:role/{self.role}",
                        "accountId": account,
                        "userName": self.role,
                    },
                    "attributes": {"mfaAuthenticated": "false"},
                },
            }
        return {
            "type": "IAMUser",
            "principalId": f"AIDA{self.name.upper()}",
            "arn": f"arn:aws:iam::{account}:user/{self.name}",
            "accountId": account,
            "userName": self.name,
        }


@dataclass
class Trail:
    """Collects records; :meth:`write` lays them out as CloudTrail delivers them (one file per 5 minutes)."""

    account: str = ACCOUNT
    region: str = "us-east-1"
    records: list[dict[str, Any]] = field(default_factory=list)

    def call(
        self,
        at: dt.datetime,
        who: Principal,
        source: str,
        name: str,
        request: dict[str, Any] | None = None,
        response: dict[str, Any] | None = None,
        error: tuple[str, str] | None = None,
        read_only: bool = False,
    ) -> dict[str, Any]:
        record: dict[str, Any] = {
            "eventVersion": "1.09",
            "userIdentity": who.identity(self.account),
            "eventTime": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "eventSource": source,
            "eventName": name,
            "awsRegion": self.region,
            "sourceIPAddress": "198.51.100.23",
            "userAgent": "aws-cli/2.17.0 Python/3.11",
            "requestParameters": request,
            "responseElements": response,
            "requestID": str(uuid.uuid4()),
            "eventID": str(uuid.uuid4()),
            "readOnly": read_only,
            "eventType": "AwsApiCall",
            "managementEvent": True,
            "recipientAccountId": self.account,
            "eventCategory": "Management",
        }
        if error:
            record["errorCode"], record["errorMessage"] = error
        self.records.append(record)
        return record

    def envelope(self, record: dict[str, Any]) -> dict[str, Any]:
        """The EventBridge event AWS delivers for a CloudTrail management event."""
        return events.cloudtrail(
            record,
            event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, record["eventID"])),
            account=self.account,
            region=self.region,
        )

    def write(self, root: Path) -> list[Path]:
        """Gzipped ``{"Records": [...]}`` files under ``AWSLogs/<account>/CloudTrail/<region>/YYYY/MM/DD/``."""
        buckets: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for record in self.records:
            at = dt.datetime.strptime(record["eventTime"], "%Y-%m-%dT%H:%M:%SZ")
            delivered = at + dt.timedelta(minutes=5 - at.minute % 5)
            buckets[(delivered.strftime("%Y/%m/%d"), delivered.strftime("%Y%m%dT%H%MZ"))].append(record)
        written = []
        for (day, stamp), records in sorted(buckets.items()):
            folder = root / "AWSLogs" / self.account / "CloudTrail" / self.region / day
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{self.account}_CloudTrail_{self.region}_{stamp}_{uuid.uuid4().hex[:16]}.json.gz"
            with gzip.open(path, "wt", encoding="utf-8") as out:
                json.dump({"Records": records}, out)
            written.append(path)
        return written
