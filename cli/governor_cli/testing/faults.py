"""Make AWS calls fail on purpose, through botocore's own event hooks, and record every call that was made.

A :class:`FaultInjector` turns a configurable share of API attempts into throttling, 5xx, connect or read timeouts
or access denied. While an injector is active, requests reach an in-process emulator one at a time, as AWS executes
each request atomically (moto alone would let two threads' conditional writes both succeed). Faults are injected
per *attempt* at ``before-send``, so botocore's real retry logic (standard mode,
bounded attempts, retry quota) handles them exactly as it would handle AWS; back-off sleeps are counted on a virtual
clock instead of slept. A read timeout is injected *after* the request was executed (in-process emulator), the
nastiest case: the change happened but the caller never heard. Only calls made inside :meth:`FaultInjector.label` are
touched, so a test's own set-up and checks run clean.

The hooks are added to ``botocore.handlers.BUILTIN_HANDLERS`` on import, so every client created afterwards carries
them (they do nothing while no injector is active). Import this module before creating clients; entering an injector
empties :func:`governor.adapters.aws.client`'s cache if the hooks had to be re-ordered (an emulator imported later).
"""

from __future__ import annotations

import json
import random
import threading
import time as _time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import botocore.endpoint
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError
from botocore.handlers import BUILTIN_HANDLERS

FaultKind = Literal["throttling", "server_error", "connect_timeout", "read_timeout", "access_denied", "failed_entries"]
ALL_FAULTS: tuple[FaultKind, ...] = ("throttling", "server_error", "connect_timeout", "read_timeout", "access_denied")
#: ``failed_entries`` (not in ALL_FAULTS): PutEvents answers 200 with ``FailedEntryCount`` and an ``ErrorCode`` per
#: entry, which botocore does not retry; only the caller can tell the findings were not accepted.
UNROUTABLE = "https://fault-injection.invalid/"
_ERRORS: dict[str, tuple[int, str, str]] = {
    "throttling": (400, "ThrottlingException", "Rate exceeded (injected)"),
    "server_error": (503, "ServiceUnavailable", "Service unavailable (injected)"),
    "access_denied": (403, "AccessDeniedException", "not authorized to perform this operation (injected)"),
}
_EC2_CODES = {"ThrottlingException": "RequestLimitExceeded", "AccessDeniedException": "UnauthorizedOperation"}
_QUERY_CODES = {"ThrottlingException": "Throttling", "AccessDeniedException": "AccessDenied"}
_REST_XML_CODES = {"ThrottlingException": "SlowDown", "AccessDeniedException": "AccessDenied"}
_MUTATING_PREFIXES = ("Describe", "Get", "List", "Lookup", "Query", "Scan", "BatchGet", "Head", "Select", "Search")


@dataclass
class ApiCall:
    """One API call as the caller saw it (all its attempts): what was asked, which faults hit it, how it ended."""

    service: str
    operation: str
    params: dict[str, Any]
    label: str | None
    faults: list[str] = field(default_factory=list)
    status: int | None = None
    error: str | None = None
    executed: int = 0

    @property
    def ok(self) -> bool:
        return self.status is not None and self.status < 300 and self.error is None

    @property
    def mutating(self) -> bool:
        """Changes something (not a read): ``StopInstances``, ``PutItem``, ``SendMessage``..."""
        return not self.operation.startswith(_MUTATING_PREFIXES)


def _cbor_text(value: str) -> bytes:
    data = value.encode()
    if len(data) < 24:
        return bytes([0x60 | len(data)]) + data
    if len(data) < 256:
        return bytes([0x78, len(data)]) + data
    return bytes([0x79]) + len(data).to_bytes(2, "big") + data


def error_response(protocol: str, status: int, code: str, message: str) -> tuple[dict[str, str], bytes]:
    """Headers and body of an AWS error in the wire format ``protocol`` uses, so botocore classifies it for real."""
    request_id = "00000000-0000-0000-0000-000000000000"
    if protocol == "ec2":
        code = _EC2_CODES.get(code, code)
        body = f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
        return {"Content-Type": "text/xml"}, f"{body}<RequestID>{request_id}</RequestID></Response>".encode()
    if protocol == "query":
        code = _QUERY_CODES.get(code, code)
        body = f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>"
        return {"Content-Type": "text/xml"}, f"{body}<RequestId>{request_id}</RequestId></ErrorResponse>".encode()
    if protocol == "rest-xml":
        code = _REST_XML_CODES.get(code, code)
        body = f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>{request_id}</RequestId></Error>"
        return {"Content-Type": "application/xml"}, body.encode()
    if protocol == "smithy-rpc-v2-cbor":
        cbor = b"\xa2" + _cbor_text("__type") + _cbor_text(code) + _cbor_text("message") + _cbor_text(message)
        return {"Content-Type": "application/cbor", "smithy-protocol": "rpc-v2-cbor"}, cbor
    headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": code, "x-amzn-RequestId": request_id}
    return headers, json.dumps({"__type": code, "message": message}).encode()


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


class _State(threading.local):
    label: str | None = None
    call: ApiCall | None = None
    protocol: str = "json"
    read_timeout: bool = False
    holding: bool = False


_STATE = _State()
_ACTIVE: FaultInjector | None = None
_LOCK = threading.Lock()
_EMULATOR = threading.Lock()  # one request at a time inside an in-process emulator: AWS executes each atomically


def _release() -> None:
    if _STATE.holding:
        _STATE.holding = False
        _EMULATOR.release()


class _VirtualTime:
    """Stands in for ``time`` inside ``botocore.endpoint``: retry back-off is counted, not slept."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)

    def sleep(self, seconds: float) -> None:
        injector = _ACTIVE
        if injector is not None:
            injector.charge(seconds)


class FaultInjector:
    """Fails ``rate`` of the labelled API attempts with one of ``kinds``, reproducibly for a given ``seed``.

    ``services`` / ``operations`` (botocore service ids such as ``ec2``, ``dynamodb``; API names such as
    ``StopInstances``) narrow where faults land; ``skip_services`` exempts some. Every labelled call is recorded in
    :attr:`calls` either way, so a rate of 0 makes a plain recorder.
    """

    def __init__(
        self,
        rate: float = 0.0,
        kinds: Iterable[FaultKind] = ALL_FAULTS,
        *,
        seed: int = 0,
        services: Iterable[str] | None = None,
        operations: Iterable[str] | None = None,
        skip_services: Iterable[str] = (),
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        only: Callable[[ApiCall], bool] | None = None,
    ) -> None:
        from governor.adapters.aws import RETRIES

        if not 0.0 <= rate <= 1.0:
            raise ValueError("rate must be between 0 and 1")
        self.rate = rate
        self.kinds: tuple[FaultKind, ...] = tuple(kinds)
        if rate and not self.kinds:
            raise ValueError("at least one fault kind is needed when rate > 0")
        self.services = frozenset(services) if services is not None else None
        self.operations = frozenset(operations) if operations is not None else None
        self.skip_services = frozenset(skip_services)
        self.only = only
        self.connect_timeout = float(connect_timeout if connect_timeout is not None else RETRIES.connect_timeout)
        self.read_timeout = float(read_timeout if read_timeout is not None else RETRIES.read_timeout)
        self.calls: list[ApiCall] = []
        self.injected: Counter[str] = Counter()
        self.attempts = 0
        self.virtual_seconds: dict[str, float] = {}
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._saved_time: Any = None

    def __enter__(self) -> FaultInjector:
        global _ACTIVE
        from governor.adapters.aws import client

        with _LOCK:
            if _ACTIVE is not None:
                raise RuntimeError("another FaultInjector is already active")
            if install_hooks():
                client.cache_clear()  # clients built before the hooks moved would miss them
            self._saved_time = botocore.endpoint.time
            botocore.endpoint.time = _VirtualTime()
            _ACTIVE = self
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        global _ACTIVE
        with _LOCK:
            botocore.endpoint.time = self._saved_time
            _ACTIVE = None

    @contextmanager
    def label(self, value: str) -> Iterator[None]:
        """Attribute (and expose to faults) every API call this thread makes inside the block to ``value``."""
        previous = _STATE.label
        _STATE.label = value
        try:
            yield
        finally:
            _STATE.label = previous

    def charge(self, seconds: float) -> None:
        """Time the current call would have spent (back-off, a timeout) on the virtual clock of its label."""
        if _STATE.label is not None:
            with self._lock:
                self.virtual_seconds[_STATE.label] = self.virtual_seconds.get(_STATE.label, 0.0) + seconds

    def calls_for(self, label: str) -> list[ApiCall]:
        with self._lock:
            return [c for c in self.calls if c.label == label]

    def _pick(self, service: str, operation: str, call: ApiCall | None = None) -> FaultKind | None:
        if self.rate <= 0 or service in self.skip_services:
            return None
        if self.only is not None and (call is None or not self.only(call)):
            return None
        if self.services is not None and service not in self.services:
            return None
        if self.operations is not None and operation not in self.operations:
            return None
        with self._lock:
            self.attempts += 1
            if self._random.random() >= self.rate:
                return None
            kind = self._random.choice(self.kinds)
            self.injected[kind] += 1
            return kind

    def _record(self, call: ApiCall) -> None:
        with self._lock:
            self.calls.append(call)


@contextmanager
def unlabelled() -> Iterator[None]:
    """Calls in this block are not the code under test (e.g. Lambda itself parking a failed event): no faults."""
    previous = _STATE.label
    _STATE.label = None
    try:
        yield
    finally:
        _STATE.label = previous


def _service_of(event_name: str) -> str:
    parts = event_name.split(".")
    return parts[1] if len(parts) > 2 else ""


def _before_parameter_build(params: Any, model: Any, context: dict[str, Any], event_name: str, **_: Any) -> None:
    injector = _ACTIVE
    if injector is None or _STATE.label is None:
        return
    call = ApiCall(
        service=_service_of(event_name),
        operation=model.name,
        params=dict(params) if isinstance(params, dict) else {},
        label=_STATE.label,
    )
    context["governor_call"] = call
    _STATE.call = call
    _STATE.protocol = model.service_model.resolved_protocol
    injector._record(call)


def _before_send(request: Any, event_name: str, **_: Any) -> AWSResponse | None:
    injector = _ACTIVE
    if injector is None:
        return None
    kind = injector._pick(_service_of(event_name), event_name.rsplit(".", 1)[-1], _STATE.call) if _STATE.label else None
    if kind is None or kind == "read_timeout":
        _release()
        _EMULATOR.acquire()  # released in _after_send once the emulator has answered
        _STATE.holding = True
    if kind is None:
        return None
    if _STATE.call is not None:
        _STATE.call.faults.append(kind)
    if kind == "connect_timeout":
        injector.charge(injector.connect_timeout)
        raise ConnectTimeoutError(endpoint_url=request.url)
    if kind == "read_timeout":
        injector.charge(injector.connect_timeout + injector.read_timeout)
        _STATE.read_timeout = True
        return None
    if kind == "failed_entries":
        status, headers, body = 200, {"Content-Type": "application/x-amz-json-1.1"}, _failed_entries(request)
    else:
        status, code, message = _ERRORS[kind]
        headers, body = error_response(_STATE.protocol, status, code, message)
    url = request.url
    request.url = UNROUTABLE  # an in-process emulator later in the chain must not execute a failed attempt
    return AWSResponse(url, status, headers, _Body(body))


def _failed_entries(request: Any) -> bytes:
    """PutEvents' answer when EventBridge refused every entry: HTTP 200, so no retry happens below the caller."""
    try:
        entries = json.loads(request.body or b"{}").get("Entries") or []
    except (TypeError, ValueError):
        entries = []
    refused = [{"ErrorCode": "InternalFailure", "ErrorMessage": "injected"} for _ in entries]
    return json.dumps({"FailedEntryCount": len(refused), "Entries": refused}).encode()


def is_put_events(call: ApiCall) -> bool:
    return call.operation == "PutEvents"


def is_conditional_write(call: ApiCall) -> bool:
    """A DynamoDB write with a condition: the outbox's and the intent's claims, the ledger's guarded records."""
    return call.service == "dynamodb" and ("ConditionExpression" in call.params or "TransactItems" in call.params)


def is_batch_import(call: ApiCall) -> bool:
    """Security Hub's BatchImportFindings: the export's one write to Security Hub."""
    return call.operation == "BatchImportFindings"


def is_mutating(call: ApiCall) -> bool:
    return call.mutating


def _after_send(request: Any, **_: Any) -> None:
    _release()
    if _ACTIVE is None or _STATE.label is None:
        return
    if _STATE.call is not None and request.url != UNROUTABLE:
        _STATE.call.executed += 1  # the attempt reached the service (an in-process emulator has just executed it)
    if _STATE.read_timeout:
        _STATE.read_timeout = False
        raise ReadTimeoutError(endpoint_url=request.url)


def _after_call(http_response: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    _release()
    call = context.get("governor_call")
    if isinstance(call, ApiCall):
        call.status = http_response.status_code
        if http_response.status_code >= 300:
            call.error = str((parsed.get("Error") or {}).get("Code") or http_response.status_code)
    _STATE.call = None


def _after_call_error(exception: BaseException, context: dict[str, Any], **_: Any) -> None:
    _release()
    call = context.get("governor_call")
    if isinstance(call, ApiCall):
        call.error = type(exception).__name__
    _STATE.call = None


_HOOKS: list[tuple[str, Any]] = [
    ("before-parameter-build", _before_parameter_build),
    ("before-send", _before_send),
    ("after-call", _after_call),
    ("after-call-error", _after_call_error),
]


class _SlackAnswer:
    """What ``urlopen`` returns to slack_sdk: Slack's ``ok``."""

    status = 200

    def __init__(self) -> None:
        import email.message

        self.headers = email.message.Message()
        self.headers["Content-Type"] = "text/plain; charset=utf-8"

    def read(self) -> bytes:
        return b"ok"


_SLACK_OPERATIONS = {"/services/": "PostWebhook", "/actions/": "RespondToClick"}


def slack_operation(url: str) -> str:
    """An incoming webhook post (a message to a channel) or a click's ``response_url`` update."""
    return next((name for part, name in _SLACK_OPERATIONS.items() if part in url), "SlackRequest")


def fake_slack_urlopen(request: Any, context: Any = None, timeout: float | None = None) -> Any:
    """Slack's side of ``slack_sdk``'s webhook client, in process: every labelled post is an :class:`ApiCall`
    (service ``slack``) that the active injector may fail like an AWS call. A read timeout is injected after Slack
    has taken the message (the post happened, the sender never heard), throttling answers 429 with Retry-After."""
    import urllib.error

    injector = _ACTIVE
    url = str(getattr(request, "full_url", request))
    if injector is None or _STATE.label is None:
        return _SlackAnswer()
    data = getattr(request, "data", b"") or b""
    call = ApiCall(
        "slack",
        slack_operation(url),
        {"Url": url.split("/")[3] if url.count("/") > 3 else url, "Text": data.decode(errors="replace")},
        _STATE.label,
    )
    injector._record(call)
    kind = injector._pick("slack", call.operation, call)
    if kind is not None:
        call.faults.append(kind)
    if kind == "connect_timeout":
        injector.charge(injector.connect_timeout)
        call.error = "URLError"
        raise urllib.error.URLError(TimeoutError("connect timed out (injected)"))
    if kind in ("throttling", "server_error", "access_denied", "failed_entries"):
        import email.message
        import io

        status = {"throttling": 429, "server_error": 503, "access_denied": 403, "failed_entries": 500}[kind]
        headers = email.message.Message()
        if status == 429:
            headers["Retry-After"] = "1"
        call.status, call.error = status, str(status)
        body = b"invalid_token" if status == 403 else b"error"
        raise urllib.error.HTTPError(url, status, "injected", headers, io.BytesIO(body))
    call.executed += 1
    if kind == "read_timeout":
        injector.charge(injector.connect_timeout + injector.read_timeout)
        call.error = "TimeoutError"
        raise TimeoutError("The read operation timed out (injected)")
    call.status = 200
    return _SlackAnswer()


@contextmanager
def fake_slack() -> Iterator[None]:
    """Slack's webhooks and response URLs answered in process (no socket), their retry back-off on the virtual
    clock: the notifier's, the report's and the click worker's Slack traffic is recorded and faulted with the rest."""
    import slack_sdk.http_retry.handler as retry_handler
    import slack_sdk.webhook.client as webhook_client

    from governor.adapters.slack import SlackWebhook

    defaults = SlackWebhook.__init__.__kwdefaults__ or {}
    saved = webhook_client.urlopen, retry_handler.time, defaults.get("sleep")
    webhook_client.urlopen = fake_slack_urlopen  # type: ignore[assignment]
    retry_handler.time = _VirtualTime()  # type: ignore[assignment]
    defaults["sleep"] = _VirtualTime().sleep  # the governor's own webhook back-off, bound as a default argument
    try:
        yield
    finally:
        webhook_client.urlopen, retry_handler.time, defaults["sleep"] = saved


def install_hooks() -> bool:
    """Put the hooks in botocore's built-in handler list: the fault first at ``before-send`` (ahead of an in-process
    emulator), the read-timeout trigger last (after it executed the request). Returns whether the list changed."""
    before = list(BUILTIN_HANDLERS)
    for entry in [*_HOOKS, ("before-send", _after_send)]:
        while entry in BUILTIN_HANDLERS:
            BUILTIN_HANDLERS.remove(entry)
    BUILTIN_HANDLERS.insert(0, ("before-send", _before_send))
    BUILTIN_HANDLERS.extend(entry for entry in _HOOKS if entry[1] is not _before_send)
    BUILTIN_HANDLERS.append(("before-send", _after_send))
    return before != BUILTIN_HANDLERS


install_hooks()
