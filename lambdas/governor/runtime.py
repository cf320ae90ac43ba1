"""What every handler shares: its environment, its adapters, parsing at the edge, and its skeleton (:class:`Handler`).

Only this module and ``cli.py`` read the environment. Adapters are built once per container and reused.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Generic, TypeVar

from pydantic import ConfigDict, Field, ValidationError

from governor.domain.model import Model
from governor.domain.ports import DeadLetters, FindingSink, Ledger, handling_event_from
from governor.events.envelopes import InvalidEventError
from governor.observability import logger, metrics, tracer
from governor.policy import Policy, PolicyError, parse_policy
from governor.runner import once_per_event

T = TypeVar("T")
P = TypeVar("P")  # a capability's parsed event
A = TypeVar("A")  # a capability's adapter bundle (its package's ``Adapters``)


class HandlerEnvironment(Model):
    """The settings the stack gives every function (see ``infra/constructs/function.py``)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    policy_json: str = Field("{}", alias="GOVERNOR_POLICY")
    ledger_table: str = Field(alias="LEDGER_TABLE")
    bus_name: str = Field(alias="BUS_NAME")
    dlq_url: str = Field(alias="DLQ_URL")
    idempotency_table: str | None = Field(None, alias="IDEMPOTENCY_TABLE")
    region: str | None = Field(None, alias="AWS_REGION")
    function: str = Field("governor", alias="GOVERNOR_FUNCTION")
    spoke_role: str | None = Field(None, alias="GOVERNOR_SPOKE_ROLE")  # organisation mode (issue 23)
    home_account: str | None = Field(None, alias="GOVERNOR_HOME_ACCOUNT")
    fanout: str | None = Field(None, alias="GOVERNOR_FANOUT")  # organisation sweep fan-out (governor.fanout)

    def policy(self) -> Policy:
        try:
            return parse_policy(json.loads(self.policy_json), source="GOVERNOR_POLICY")
        except json.JSONDecodeError as error:
            raise PolicyError(f"GOVERNOR_POLICY: not valid JSON ({error})") from None


@dataclass
class Runtime:
    """The adapters a handler works with; tests build one from in-memory fakes."""

    policy: Policy
    ledger: Ledger
    sink: FindingSink
    dead_letters: DeadLetters
    region: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def environment() -> HandlerEnvironment:
    try:
        return HandlerEnvironment.model_validate(dict(os.environ))
    except ValidationError as error:
        missing = ", ".join(str(e["loc"][0]) for e in error.errors())
        raise RuntimeError(f"function environment incomplete: {missing}") from None


@cache
def default_runtime() -> Runtime:
    """Built on first use in a container (not at import, so tests and ``explain`` never need AWS)."""
    from governor.adapters.bus import EventBusSink
    from governor.adapters.dlq import SqsDeadLetters
    from governor.adapters.ledger import DynamoLedger

    env = environment()
    policy = env.policy()
    extras: dict[str, Any] = {}
    if env.fanout:
        from governor.fanout import FanoutConfig

        extras["fanout"] = FanoutConfig.parse(env.fanout)
    if env.spoke_role:
        from governor.adapters.aws import Organization, client

        client.configure(Organization(env.spoke_role, env.home_account, env.function, env.region))
    return Runtime(
        policy=policy,
        ledger=DynamoLedger(env.ledger_table, policy.ledger.retention_days, env.region),
        sink=EventBusSink(env.bus_name, env.region),
        dead_letters=SqsDeadLetters(env.dlq_url, env.region),
        region=env.region,
        extras=extras,
    )


def account_of(context: Any) -> str | None:
    """The function's own account, from the invoked function ARN (``arn:aws:lambda:REGION:ACCOUNT:function:...``)."""
    arn = getattr(context, "invoked_function_arn", None)
    parts = arn.split(":") if isinstance(arn, str) else []
    return parts[4] if len(parts) > 4 and parts[4].isdigit() else None


def reject(event: Any, error: InvalidEventError, runtime: Runtime) -> dict[str, Any]:
    """Log the one validation error with the event id, count it, and park the event in the DLQ with its reason."""
    logger.error("rejected event", extra={"event_id": error.event_id, "reason": str(error)})
    metrics.add_metric(name="InvalidEvents", unit="Count", value=1)
    runtime.dead_letters.send(event, str(error))
    return {"status": "rejected", "event_id": error.event_id, "reason": str(error)}


def run_edge(
    event: Any, runtime: Runtime, parse: Callable[[Any], T], work: Callable[[T, Runtime], dict[str, Any]]
) -> dict[str, Any]:
    """Parse at the edge; only a valid event reaches ``work``. Transient AWS errors propagate so Lambda retries.

    Decision code may still find a field that parses but cannot be true (a KMS rotation period of "half a year"); it
    raises ``InvalidEventError`` before acting, and the event is parked with that reason like any edge rejection.
    """
    try:
        parsed = parse(event)
    except InvalidEventError as error:
        return reject(event, error, runtime)
    origin = event if isinstance(event, dict) else {}
    with handling_event_from(origin.get("account"), origin.get("region")):  # stamped on every ledger decision
        try:
            return work(parsed, runtime)
        except InvalidEventError as error:
            return reject(event, error, runtime)


def fan_out(
    event: Any, runtime: Runtime, sweep_name: str, sweep: Callable[[Any, Runtime], dict[str, Any]]
) -> dict[str, Any] | None:
    """A sweeping handler's organisation branch (:func:`governor.fanout.dispatch`): plan a scheduled round, or run a
    batch of targets. ``None`` when the function has no fan-out (``GOVERNOR_FANOUT`` unset: a single account, the
    default), and then ``governor.fanout`` is never imported."""
    if runtime.extras.get("fanout") is None:
        return None
    from governor.fanout import dispatch

    return dispatch(event, runtime, sweep_name, sweep)


@dataclass(frozen=True)
class Invocation:
    """One call of a handler besides its parsed event: the event as it came (the idempotency key, what the DLQ
    keeps), the Lambda context (its remaining time), the function's own account (from the context's function ARN
    unless a test names it) and the moment it is handled (a test's clock, else now)."""

    event: Any
    context: Any = None
    account: str | None = None
    now: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))


@dataclass(frozen=True)
class Handler(Generic[P, A]):
    """A capability's entry point, built from its parts: the one handler skeleton.

    ``handle`` parses at the edge (:func:`run_edge`: bad input to the DLQ with its reason), then runs ``process``
    once per event id (:func:`governor.runner.once_per_event`, the one way into idempotency, keyed on
    ``<module>.<step>``) with the capability's adapters (its package's ``Adapters``, or what a test passes).
    ``lambda_handler()`` is the Lambda entry: Powertools' logger, metrics and tracer around the runtime the container
    builds once; with ``sweep``, organisation mode first plans or runs the fan-out (:func:`fan_out`), each target with
    the adapters ``targets`` (else ``adapters``) builds for it.
    """

    module: str  # the capability's handler module (``__name__``)
    parse: Callable[[Any, Invocation], P]
    process: Callable[[P, Runtime, A, Invocation], dict[str, Any]]
    adapters: Callable[[Any, Runtime], A]  # an event's adapters: the home account's, or a member's (its spoke role)
    step: str = "process"  # with ``module``, the idempotency key prefix (kept across releases: records in the table)
    sweep: str | None = None  # the fan-out's sweep name (organisation mode), for a sweeping capability
    targets: Callable[[Any, Runtime], A] | None = None
    in_progress_seconds: int | None = None  # a time-bound action's in-progress expiry (the registry entry's)
    runtime: Callable[[], Runtime] | None = None  # the container's runtime; default :func:`default_runtime`
    counted: Callable[[dict[str, Any]], None] | None = None  # metrics from the result, inside ``log_metrics``
    #: Answers an event that is not for the edge at all (interactions: Slack's HTTP request), else ``None``.
    front: Callable[[Any, Runtime, A, Any], dict[str, Any] | None] | None = None

    @property
    def name(self) -> str:
        return f"{self.module}.{self.step}"

    def handle(
        self,
        event: Any,
        runtime: Runtime,
        adapters: A | None = None,
        *,
        context: Any = None,
        now: dt.datetime | None = None,
        account: str | None = None,
    ) -> dict[str, Any]:
        """Parse at the edge, then process once per event id; ``adapters`` built for the event unless given."""
        if self.front is not None:
            answered = self.front(
                event, runtime, adapters if adapters is not None else self.adapters(event, runtime), context
            )
            if answered is not None:
                return answered
        call = Invocation(event, context, account or account_of(context), now or dt.datetime.now(dt.UTC))

        def work(parsed: P, rt: Runtime) -> dict[str, Any]:
            chosen = adapters if adapters is not None else self.adapters(event, rt)
            return once_per_event(
                event=event,
                name=self.name,
                work=lambda: self.process(parsed, rt, chosen, call),
                context=context,
                in_progress_seconds=self.in_progress_seconds,
            )

        return run_edge(event, runtime, lambda raw: self.parse(raw, call), work)

    def lambda_handler(self) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
        """The function Lambda calls (``governor.<name>.handler.lambda_handler``)."""

        def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            runtime = self.runtime() if self.runtime is not None else default_runtime()
            if self.sweep is not None:
                targets = self.targets or self.adapters
                fanned = fan_out(
                    event, runtime, self.sweep, lambda t, rt: self.handle(t, rt, targets(t, rt), context=context)
                )
                if fanned is not None:
                    return fanned
            result = self.handle(event, runtime, self.adapters(event, runtime), context=context)
            if self.counted is not None:
                self.counted(result)
            return result

        lambda_handler.__module__ = self.module
        lambda_handler.__qualname__ = "lambda_handler"
        entry: Callable[[dict[str, Any], Any], dict[str, Any]] = logger.inject_lambda_context(
            metrics.log_metrics(tracer.capture_lambda_handler(lambda_handler))
        )
        # The end of the sandbox's init: what the import built lives as long as the sandbox. Frozen, the full garbage
        # collections that the first invocations' allocations trigger no longer walk it (bench section 1: the first two
        # sweeps of a process paid 0.12 s each for one, 1.2 ms an instance at 100 instances).
        gc.freeze()
        return entry
