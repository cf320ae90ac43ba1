"""Organisation fan-out, AWS side: the accounts of the configured OUs, and the queue of sweep targets.

The planner (``governor.fanout``) reads the accounts of the OUs the spokes are deployed to and enqueues one message
per (account, region) on the sweeping function's own targets queue. Both calls are counted for the benchmarks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from governor.adapters.aws import client

#: Walking the OU tree: ``ListAccounts`` would list every account of the organisation, also those outside the OUs
#: that hold no spoke (their sweeps could only fail), so the planner lists the configured OUs and their children.
ACCOUNT_ACTIONS = frozenset({"organizations:ListAccountsForParent", "organizations:ListOrganizationalUnitsForParent"})
#: Enqueueing sweep targets (``SendMessageBatch`` is authorised as ``sqs:SendMessage``).
QUEUE_ACTIONS = frozenset({"sqs:SendMessage"})
#: What the Lambda event source mapping needs to consume the targets queue (CDK's ``grantConsumeMessages``).
CONSUME_ACTIONS = frozenset(
    {
        "sqs:ReceiveMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueUrl",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
    }
)
IAM_ACTIONS = ACCOUNT_ACTIONS | QUEUE_ACTIONS | CONSUME_ACTIONS

#: SQS's limit of entries per ``SendMessageBatch``.
SEND_BATCH = 10


class OrganizationAccounts:
    """The ACTIVE accounts under some OUs (or the root), nested OUs included, in a stable order."""

    def __init__(self, region: str | None = None, organizations: Any = None) -> None:
        self._organizations = organizations or client("organizations", region)
        self.calls = 0

    def _pages(self, operation: str, parent: str, key: str) -> Iterable[dict[str, Any]]:
        paginator = self._organizations.get_paginator(operation)
        for page in paginator.paginate(ParentId=parent):
            self.calls += 1
            yield from page.get(key, [])

    def accounts(self, parents: Sequence[str]) -> list[str]:
        """Breadth-first over the OU tree below ``parents``; suspended and closed accounts are left out."""
        found: dict[str, None] = {}
        todo, seen = list(parents), set()
        while todo:
            parent = todo.pop(0)
            if parent in seen:
                continue
            seen.add(parent)
            for account in self._pages("list_accounts_for_parent", parent, "Accounts"):
                if account.get("State", account.get("Status", "ACTIVE")) == "ACTIVE":
                    found[str(account["Id"])] = None
            todo.extend(
                str(ou["Id"])
                for ou in self._pages("list_organizational_units_for_parent", parent, "OrganizationalUnits")
            )
        return sorted(found)


class TargetQueue:
    """The sweeping function's own targets queue; every message is one (account, region) to sweep."""

    def __init__(self, queue_url: str, region: str | None = None, sqs: Any = None) -> None:
        self._url = queue_url
        self._sqs = sqs or client("sqs", region)
        self.calls = 0

    def send(self, bodies: Sequence[dict[str, Any]]) -> None:
        """Enqueue every body, ten a request; a refused entry is sent again once, then raises (the planner retries)."""
        for start in range(0, len(bodies), SEND_BATCH):
            entries = [
                {"Id": str(index), "MessageBody": json.dumps(body, sort_keys=True)}
                for index, body in enumerate(bodies[start : start + SEND_BATCH])
            ]
            for _ in range(2):
                self.calls += 1
                failed = self._sqs.send_message_batch(QueueUrl=self._url, Entries=entries).get("Failed", [])
                refused = {f["Id"] for f in failed}
                entries = [e for e in entries if e["Id"] in refused]
                if not entries:
                    break
            if entries:
                raise RuntimeError(f"SQS refused {len(entries)} sweep targets: {failed[0].get('Message', '')}")
