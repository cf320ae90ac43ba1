"""Deploy-time checks against the target account, run by ``app.py`` under ``cdk deploy`` (never by the tests).

Reserving Lambda concurrency fails the CloudFormation deploy unless the account keeps at least 100 unreserved
executions; new accounts often have a quota of 10. Checking before the deploy turns a failed, rolled-back stack
into one clear line.
"""

from __future__ import annotations

from typing import Any

#: Lambda refuses a reservation that leaves fewer unreserved concurrent executions than this.
MIN_UNRESERVED = 100


def concurrency_problem(lambda_client: Any, reserved: int) -> str | None:
    """Why reserving ``reserved`` executions would fail in this account and region, or None when it fits."""
    settings = lambda_client.get_account_settings()
    limit = settings["AccountLimit"]
    unreserved = int(limit["UnreservedConcurrentExecutions"])
    if unreserved - reserved >= MIN_UNRESERVED:
        return None
    total = int(limit["ConcurrentExecutions"])
    return (
        f"reserved concurrency {reserved} (spot.reserved_concurrency + interactions.reserved_concurrency) would "
        f"leave {unreserved - reserved} unreserved concurrent executions (account quota {total}); Lambda requires "
        f"{MIN_UNRESERVED}. Ask for a higher 'Concurrent executions' quota in Service Quotas, or set them to null"
    )
