"""SSM Run Command: the checkpoint command sent to an instance before a stop or on a Spot warning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from governor.adapters.aws import client

IAM_ACTIONS = frozenset({"ssm:SendCommand", "ssm:GetCommandInvocation"})
DOCUMENT = "AWS-RunShellScript"


@dataclass(frozen=True)
class CommandResult:
    """Whether SSM accepted the command for the instance; ``error`` says why not (e.g. agent not registered)."""

    delivered: bool
    command_id: str | None = None
    error: str | None = None


class SsmCommands:
    def __init__(
        self, region: str | None = None, ssm: Any = None, *, account: str | None = None, event_id: str | None = None
    ) -> None:
        self._ssm = ssm or client("ssm", region, account=account, event_id=event_id)
        self.calls = 0

    def send(self, instance_id: str, command: str, timeout_seconds: int, comment: str = "") -> CommandResult:
        """Send ``command`` with an execution timeout; an unmanaged instance is a result, not an exception."""
        self.calls += 1
        try:
            response = self._ssm.send_command(
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
