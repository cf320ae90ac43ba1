"""EventBridge envelopes and CloudTrail records, parsed at the edge.

Handlers subclass :class:`GovernorEvent` with a typed ``detail``; ``explain`` accepts either an EventBridge event or a
bare CloudTrail record and normalises both into an :class:`InboundEvent`.

:class:`EventBridgeEnvelope` is field for field Powertools' ``EventBridgeModel`` (same names, aliases, types and its
EventBridge Scheduler ``detail: "{}"`` fix; ``tests/unit/test_envelopes_powertools.py`` holds them equal on every event
sample). It is ours because importing Powertools' model loads its ``parser.models`` package, about 150 models for every
event source AWS has, which cost a handler more CPU at import than ``aws_lambda_powertools`` itself (issue 24,
bench/README.md section 2).

Every model here, as everywhere in the runtime, derives from :class:`governor.domain.model.Model`, which defers
building its validator to its first use.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from governor.domain.model import Model
from governor.domain.times import bounded

CLOUDTRAIL_DETAIL_TYPE = "AWS API Call via CloudTrail"
M = TypeVar("M", bound=BaseModel)


class InvalidEventError(ValueError):
    """An event the governor cannot accept; the message says what is wrong. The event goes to the DLQ."""

    def __init__(self, message: str, event_id: str | None = None) -> None:
        super().__init__(message)
        self.event_id = event_id


def _bounded_time(value: dt.datetime | None) -> dt.datetime | None:
    """Event times must lie in the supported range: a record dated 9999-12-31 is malformed, not far-future work."""
    return bounded(value, "time") if value is not None else None


BoundedTime = Annotated[dt.datetime, AfterValidator(_bounded_time)]


class UserIdentity(Model):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: str | None = None
    arn: str | None = None
    account_id: str | None = Field(None, alias="accountId")
    principal_id: str | None = Field(None, alias="principalId")
    user_name: str | None = Field(None, alias="userName")
    session_context: dict[str, Any] | None = Field(None, alias="sessionContext")


class CloudTrailRecord(Model):
    """One CloudTrail record, as in log files and as the ``detail`` of an "AWS API Call via CloudTrail" event."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    event_version: str | None = Field(None, alias="eventVersion")
    event_time: BoundedTime = Field(alias="eventTime")
    event_source: str = Field(alias="eventSource")
    event_name: str = Field(alias="eventName")
    aws_region: str | None = Field(None, alias="awsRegion")
    source_ip: str | None = Field(None, alias="sourceIPAddress")
    user_identity: UserIdentity = Field(default_factory=UserIdentity, alias="userIdentity")
    request_parameters: dict[str, Any] | None = Field(None, alias="requestParameters")
    response_elements: dict[str, Any] | None = Field(None, alias="responseElements")
    error_code: str | None = Field(None, alias="errorCode")
    error_message: str | None = Field(None, alias="errorMessage")
    event_id: str | None = Field(None, alias="eventID")
    recipient_account_id: str | None = Field(None, alias="recipientAccountId")

    @property
    def failed(self) -> bool:
        """A call with an ``errorCode`` changed nothing."""
        return bool(self.error_code)


class InstanceStateDetail(Model):
    """``detail`` of "EC2 Instance State-change Notification": ``instance-id`` and ``state``, as EC2 writes them."""

    model_config = ConfigDict(extra="allow")

    instance_id: str = Field(alias="instance-id", pattern=r"^i-[0-9a-f]{8,17}$")
    state: Literal["pending", "running", "stopping", "stopped", "shutting-down", "terminated"]


class EventBridgeEnvelope(Model):
    """An EventBridge event (https://docs.aws.amazon.com/eventbridge/latest/ref/overiew-event-structure.html)."""

    model_config = ConfigDict(populate_by_name=True)

    version: str
    id: str
    source: str
    account: str
    time: dt.datetime
    region: str
    resources: list[str]
    detail_type: str = Field(alias="detail-type")
    detail: dict[str, Any] | BaseModel  # Powertools' RawDictOrModel: subclasses narrow it to a model
    replay_name: str | None = Field(None, alias="replay-name")

    @field_validator("detail", mode="before")
    @classmethod
    def _scheduler_detail(cls, value: Any, info: Any) -> Any:
        """EventBridge Scheduler sends ``detail`` as the string ``"{}"`` when the schedule has no payload."""
        return {} if info.data.get("source") == "aws.scheduler" and value == "{}" else value


class GovernorEvent(EventBridgeEnvelope):
    """An EventBridge event as delivered to a Lambda target; subclasses narrow ``detail``."""

    time: BoundedTime
    detail: dict[str, Any]


class CloudTrailEvent(EventBridgeEnvelope):
    time: BoundedTime
    detail: CloudTrailRecord


class InboundEvent(Model):
    """Any accepted event, reduced to what the policies dispatch on."""

    id: str
    kind: str
    source: str
    detail_type: str
    account: str | None = None
    region: str | None = None
    time: dt.datetime | None = None
    detail: dict[str, Any]
    cloudtrail: CloudTrailRecord | None = None

    @property
    def event_name(self) -> str | None:
        return self.cloudtrail.event_name if self.cloudtrail else None


def _near_miss(raw: Any, location: tuple[Any, ...]) -> str:
    """`` (found 'instance_id'; AWS writes 'instance-id')`` when a required field is there under another spelling."""
    parent = raw
    for part in location[:-1]:
        parent = parent.get(part) if isinstance(parent, dict) else None
    name = location[-1] if location else None
    if not isinstance(parent, dict) or not isinstance(name, str):
        return ""
    for other in (name.replace("-", "_"), name.replace("_", "-")):
        if other != name and other in parent:
            return f" (found '{other}'; AWS writes '{name}')"
    return ""


def _describe(error: ValidationError, raw: Any = None) -> str:
    parts = []
    problems = error.errors(include_input=False)
    for item in problems[:5]:
        path = ".".join(str(p) for p in item["loc"]) or "(event)"
        hint = _near_miss(raw, item["loc"]) if item["type"] == "missing" else ""
        parts.append(f"{path}: {item['msg']}{hint}")
    more = len(problems) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def parse_model(model: type[M], raw: Any) -> M:
    """Validate ``raw`` against ``model``; any failure is one :class:`InvalidEventError` naming the bad fields."""
    event_id = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
    if not isinstance(raw, dict):
        raise InvalidEventError(f"an event must be a JSON object, not {type(raw).__name__}", event_id)
    try:
        parsed = model.model_validate(raw)
        when = getattr(parsed, "time", None)
        if isinstance(when, dt.datetime):  # every envelope's time, whichever model the handler narrowed it to
            bounded(when, "time")
        return parsed
    except ValidationError as error:
        raise InvalidEventError(f"invalid {model.__name__}: {_describe(error, raw)}", event_id) from None
    except (TypeError, ValueError, RecursionError) as error:
        raise InvalidEventError(f"invalid {model.__name__}: {error}", event_id) from None


def normalise(raw: Any) -> InboundEvent:
    """Accept an EventBridge event or a bare CloudTrail record (as found in log files)."""
    if not isinstance(raw, dict):
        raise InvalidEventError(f"an event must be a JSON object, not {type(raw).__name__}")
    if "detail-type" in raw or "detail" in raw:
        envelope = parse_model(GovernorEvent, raw)
        record = None
        if envelope.detail_type == CLOUDTRAIL_DETAIL_TYPE:
            record = parse_model(CloudTrailRecord, envelope.detail)
        return InboundEvent(
            id=envelope.id,
            kind=record.event_name if record else envelope.detail_type,
            source=envelope.source,
            detail_type=envelope.detail_type,
            account=envelope.account,
            region=envelope.region,
            time=envelope.time,
            detail=envelope.detail,
            cloudtrail=record,
        )
    if "eventName" in raw or "eventSource" in raw:
        record = parse_model(CloudTrailRecord, raw)
        service = record.event_source.split(".", 1)[0]
        return InboundEvent(
            id=record.event_id or f"{record.event_name}-{record.event_time.isoformat()}",
            kind=record.event_name,
            source=f"aws.{service}",
            detail_type=CLOUDTRAIL_DETAIL_TYPE,
            account=record.recipient_account_id or record.user_identity.account_id,
            region=record.aws_region,
            time=record.event_time,
            detail=raw,
            cloudtrail=record,
        )
    raise InvalidEventError("not an EventBridge event (no 'detail-type') nor a CloudTrail record (no 'eventName')")
