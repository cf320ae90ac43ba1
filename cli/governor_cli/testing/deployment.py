"""The governor's handlers "deployed" on the in-process emulator, invoked the way Lambda invokes them.

Every capability in ``governor.registry`` is covered, so the harness covers whatever capabilities
exist. :meth:`Deployment.deliver` reproduces Lambda's asynchronous semantics: an invocation that raises is retried
(twice by default, like the factory's ``retry_attempts=2``), and after the last failure the event is written to the
function's DLQ as a Lambda on-failure record with the error, exactly what ``governor dlq list`` reads.
Use inside ``moto.mock_aws()``.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import os
import threading
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from governor.policy import Policy
from governor_cli.testing.faults import FaultInjector

REGION = "us-east-1"
LEDGER_TABLE = "governor-ledger"
REPORTS_BUCKET = "governor-reports-soak"
#: What the harness's Slack app uses (the scenarios sign requests with the same value).
SLACK_SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # noqa: S105 - Slack's documented example value
_ENV_LOCK = threading.RLock()


@functools.cache
def image_id() -> str:
    """One of the emulator's Amazon images (the same in every fresh emulator; listing them all takes seconds)."""
    from governor.adapters.aws import client

    return str(client("ec2", REGION).describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


def _deployed_environment(function: str) -> dict[str, str]:
    """What the stack adds to ``function``'s environment beyond its policy sections (its scenario hooks'
    ``DEPLOYED_ENVIRONMENT``: the report's archive bucket)."""
    from governor_cli.demo.hooks import defining

    return {k: v for c, extra in defining("DEPLOYED_ENVIRONMENT") if c.name == function for k, v in extra.items()}


def handler_names() -> list[str]:
    """The registered capabilities, each a package ``governor.<name>`` with its ``handler`` module."""
    from governor.registry import REGISTRY

    return sorted(REGISTRY)


def handler_module(name: str) -> ModuleType:
    return importlib.import_module(f"governor.{name}.handler")


class LambdaContext:
    """What Powertools reads from a Lambda context; ``remaining_ms`` is the time left when the invocation starts."""

    def __init__(self, function: str, remaining_ms: int = 60_000) -> None:
        self.function_name = f"GpuFleetGovernor-{function}"
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = 512
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:123456789012:function:{self.function_name}"
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "2026/12/02/[$LATEST]reliability"
        self._remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self._remaining_ms


def reset_handler_caches() -> None:
    """Forget runtimes and adapters built for a previous environment (functools caches in handlers). The boto3
    clients themselves stay cached: an in-process emulator intercepts them whichever world is current."""
    from governor.runtime import default_runtime

    default_runtime.cache_clear()
    for name in handler_names():
        for value in vars(handler_module(name)).values():
            clear = getattr(value, "cache_clear", None)
            if callable(clear):
                clear()


@dataclass
class Delivery:
    """How one delivery of one event ended: ``handled``, ``rejected`` (invalid, parked by the handler) or ``dlq``."""

    function: str
    event_id: str | None
    status: str
    attempts: int
    reason: str | None = None
    result: dict[str, Any] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)


class Deployment:
    """The shared resources the stack would create (ledger, idempotency table, bus, one DLQ per function) and the
    handlers with the environment the Lambda factory gives them."""

    def __init__(self, policy: Policy, region: str = REGION, retries: int = 2) -> None:
        from governor.adapters.aws import client
        from governor_cli.demo.bootstrap import create_shared

        self.policy = policy
        self.region = region
        self.retries = retries
        self.functions = handler_names()
        self.local = create_shared(region)
        sqs = client("sqs", region)
        for name in self.functions:
            if name not in self.local.dlq_urls:
                self.local.dlq_urls[name] = sqs.create_queue(QueueName=f"governor-{name}-dlq")["QueueUrl"]
        self._active: str | None = None
        self._saved: dict[str, str | None] = {}
        self._people_facing(policy)
        reset_handler_caches()

    def _people_facing(self, policy: Policy) -> None:
        """What the notifier, report and interactions functions need besides the shared tables: the Slack secrets,
        a verified SES sender, the reports bucket, and the functions a click is handed to (its own worker, idle)."""
        import io
        import zipfile

        from governor.adapters.aws import client
        from governor_cli.demo.hooks import defining

        secrets = client("secretsmanager", self.region)
        secrets.create_secret(
            Name=policy.notifications.slack_secret_name, SecretString="https://hooks.slack.com/services/T0/B0/soak"
        )
        for _, seeded in defining("deployed_secrets"):  # each capability's own (the Slack app's signing secret)
            for name, value in seeded(policy).items():
                secrets.create_secret(Name=name, SecretString=value)
        if policy.notifications.email_sender:
            client("ses", self.region).verify_email_identity(EmailAddress=policy.notifications.email_sender)
        client("s3", self.region).create_bucket(Bucket=REPORTS_BUCKET)
        role = client("iam", self.region).create_role(
            RoleName="governor-soak-function",
            AssumeRolePolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "lambda.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
        )["Role"]["Arn"]
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as archive:
            archive.writestr("handler.py", "def handler(event, context):\n    return None\n")
        for name in ("governor-idle", "GpuFleetGovernor-interactions"):
            client("lambda", self.region).create_function(
                FunctionName=name,
                Runtime="python3.11",
                Role=role,
                Handler="handler.handler",
                Code={"ZipFile": code.getvalue()},
            )

    def environment(self, function: str) -> dict[str, str]:
        return {
            **self.local.environment(function, self.policy),
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_LAMBDA_FUNCTION_NAME": f"GpuFleetGovernor-{function}",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_DISABLED": "true",
            **_deployed_environment(function),
        }

    def activate(self, function: str) -> None:
        """Give the process ``function``'s environment (as its Lambda container would have) and a fresh runtime."""
        from governor.runtime import default_runtime

        with _ENV_LOCK:
            if self._active == function:
                return
            for key, value in self.environment(function).items():
                self._saved.setdefault(key, os.environ.get(key))
                os.environ[key] = value
            default_runtime.cache_clear()
            self._active = function

    def close(self) -> None:
        """Put the environment back as it was before the first activation."""
        with _ENV_LOCK:
            for key, value in self._saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            self._saved.clear()
            self._active = None
        reset_handler_caches()

    def invoke(self, function: str, event: Any, context: LambdaContext | None = None) -> dict[str, Any]:
        """One invocation, as Lambda makes it: exceptions propagate."""
        self.activate(function)
        result = handler_module(function).lambda_handler(copy.deepcopy(event), context or LambdaContext(function))
        return result if isinstance(result, dict) else {"result": result}

    def request(self, function: str, event: Any, *, injector: FaultInjector | None = None, label: str = "") -> Delivery:
        """A synchronous request (a Function URL): one invocation, no retry, no DLQ. An error is the caller's answer
        (Slack shows the user that the click failed), so it ends ``rejected`` with the error as its reason."""
        event_id = event.get("id") if isinstance(event, dict) and isinstance(event.get("id"), str) else None
        tag = f"{label}#1"
        started = time.perf_counter()
        try:
            with injector.label(tag) if injector is not None else nullcontext():
                result = self.invoke(function, event)
        except Exception as error:
            result = {"status": "rejected", "reason": f"answered 502: {type(error).__name__}: {error}"}
        if int(result.get("statusCode") or 200) >= 500:
            result = {"status": "rejected", "reason": f"answered {result['statusCode']}: {result.get('body')}"}
        virtual = injector.virtual_seconds.get(tag, 0.0) if injector is not None else 0.0
        seconds = [time.perf_counter() - started + virtual]
        status = "rejected" if result.get("status") == "rejected" else "handled"
        return Delivery(function, event_id, status, 1, result.get("reason"), result, seconds)

    def deliver(
        self, function: str, event: Any, *, park: bool = True, injector: FaultInjector | None = None, label: str = ""
    ) -> Delivery:
        """An asynchronous delivery: retried on error, then parked in the function's DLQ with the last error.

        With an ``injector``, each attempt's calls are labelled ``<label>#<attempt>`` (so faults reach them) and
        ``seconds`` holds each attempt's duration: wall time plus the injector's virtual back-off and timeouts.
        """
        event_id = event.get("id") if isinstance(event, dict) and isinstance(event.get("id"), str) else None
        error: BaseException | None = None
        seconds: list[float] = []
        for attempt in range(1, self.retries + 2):
            tag = f"{label}#{attempt}"
            started = time.perf_counter()
            try:
                with injector.label(tag) if injector is not None else nullcontext():
                    result = self.invoke(function, event)
            except Exception as caught:
                error = caught
                continue
            finally:
                virtual = injector.virtual_seconds.get(tag, 0.0) if injector is not None else 0.0
                seconds.append(time.perf_counter() - started + virtual)
            status = "rejected" if result.get("status") == "rejected" else "handled"
            return Delivery(function, event_id, status, attempt, result.get("reason"), result, seconds)
        reason = f"RetriesExhausted: {type(error).__name__}: {error}"
        if park:
            self._park(function, event, error)
        return Delivery(function, event_id, "dlq", self.retries + 1, reason, {}, seconds)

    def _park(self, function: str, event: Any, error: BaseException | None) -> None:
        from governor.adapters.aws import client
        from governor_cli.testing.faults import unlabelled

        record = {
            "version": "1.0",
            "requestContext": {"condition": "RetriesExhausted", "approximateInvokeCount": self.retries + 1},
            "requestPayload": event,
            "responseContext": {"statusCode": 200, "functionError": "Unhandled"},
            "responsePayload": {"errorMessage": str(error), "errorType": type(error).__name__},
        }
        with unlabelled():
            client("sqs", self.region).send_message(
                QueueUrl=self.local.dlq_urls[function], MessageBody=json.dumps(record, default=str)
            )

    def dlq_messages(self, function: str) -> list[dict[str, Any]]:
        """Every message in ``function``'s DLQ (peeked, left in place)."""
        from governor_cli.dlq_admin import DlqAdmin

        return [
            letter.summary() | {"event": letter.event}
            for letter in DlqAdmin(self.region, wait_seconds=0).peek(self.local.dlq_urls[function], 10_000)
        ]

    def ledger_decisions(self) -> list[dict[str, Any]]:
        return self.ledger_items("decision")

    def ledger_items(self, kind: str) -> list[dict[str, Any]]:
        from governor.adapters.ledger import DynamoLedger

        return DynamoLedger(self.local.ledger_table, region=self.region).query_kind(kind)
