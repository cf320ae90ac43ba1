"""SSM Run Command: the checkpoint command sent to an instance before a stop or on a Spot warning.

``SendCommand`` takes no client token, so a resend signals the job twice. Its client has botocore's retries switched
off (one attempt): an answer lost to a read timeout is never resent by the transport. ``governor.domain.once``
records the intent first and, on a retry, finds the command by the intent id carried in its ``Comment``
(``ListCommands``) instead of sending it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client
from governor.observability import logger, metrics

# SendCommand is the Checkpoint action's permission (governor.domain.actions).
IAM_ACTIONS = frozenset({"ssm:GetCommandInvocation", "ssm:ListCommands"})
DOCUMENT = "AWS-RunShellScript"


@dataclass(frozen=True)
class CommandResult:
    """Whether SSM accepted the command for the instance; ``error`` says why not (e.g. agent not registered)."""

    delivered: bool
    command_id: str | None = None
    error: str | None = None


class SsmCommands:
    def __init__(
        self,
        region: str | None = None,
        ssm: Any = None,
        sender: Any = None,
        *,
        account: str | None = None,
        event_id: str | None = None,
    ) -> None:
        self._ssm = ssm or client("ssm", region, account=account, event_id=event_id)
        self._sender = sender or (
            ssm if ssm is not None else client("ssm", region, single_attempt=True, account=account, event_id=event_id)
        )
        self.calls = 0

    def send(self, instance_id: str, command: str, timeout_seconds: int, comment: str = "") -> CommandResult:
        """Send ``command`` with an execution timeout; an unmanaged instance is a result, not an exception."""
        self.calls += 1
        try:
            response = self._sender.send_command(
                InstanceIds=[instance_id],
                DocumentName=DOCUMENT,
                Comment=(comment or "gpu-fleet-governor checkpoint")[:100],
                TimeoutSeconds=max(30, timeout_seconds),
                Parameters={"commands": [command], "executionTimeout": [str(timeout_seconds)]},
            )
        except ClientError as error:
            code = error.response["Error"]["Code"]
            if code in ("InvalidInstanceId", "InvalidDocument", "UnsupportedPlatformType"):
                return CommandResult(delivered=False, error=f"{code}: {error.response['Error'].get('Message', '')}")
            raise
        return CommandResult(delivered=True, command_id=response["Command"]["CommandId"])

    def find(self, instance_id: str, comment: str) -> str | None:
        """The id of a command SSM accepted for ``instance_id`` with exactly this ``Comment``, or None if there is none:
        proof, for an intent recorded without a command id, that the earlier send never reached SSM."""
        self.calls += 1
        kwargs: dict[str, Any] = {"InstanceId": instance_id, "MaxResults": 50}
        while True:
            page = self._ssm.list_commands(**kwargs)
            for command in page.get("Commands", []):
                if command.get("Comment") == comment:
                    metrics.add_metric(name="CommandsFoundNotResent", unit="Count", value=1)
                    logger.info("command found by its intent id; not sent again", extra={"instance_id": instance_id})
                    return str(command["CommandId"])
            token = page.get("NextToken")
            if not token:
                return None
            kwargs["NextToken"] = token

    def status(self, command_id: str, instance_id: str) -> str:
        """Pending, InProgress, Success, Failed, TimedOut, Cancelled... or ``Unknown`` when SSM has no record."""
        self.calls += 1
        try:
            response = self._ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        except ClientError as error:
            if error.response["Error"]["Code"] == "InvocationDoesNotExist":
                return "Unknown"
            raise
        return str(response.get("Status", "Unknown"))
