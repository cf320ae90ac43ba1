"""What every handler shares: its environment, its adapters, and parsing at the edge (idempotency: ``governor.runner``).

Only this module and ``cli.py`` read the environment. Adapters are built once per container and reused.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

from pydantic import ConfigDict, Field, ValidationError

from governor.domain.model import Model
from governor.domain.ports import DeadLetters, FindingSink, Ledger, handling_event_from
from governor.events.envelopes import InvalidEventError
from governor.observability import logger, metrics
from governor.policy import Policy, PolicyError, parse_policy
from governor.runner import once_per_event

T = TypeVar("T")


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


def _lambda_context(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The Lambda context among a call's arguments, if any (it tells Powertools when an in-progress record expires)."""
    for value in (*args, *kwargs.values()):
        if callable(getattr(value, "get_remaining_time_in_millis", None)):
            return value
    return None


def idempotent_on_event_id() -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    """For handlers not yet on the runner's act path (lifecycle, notifier, report): the runner's one idempotency entry
    (:func:`governor.runner.once_per_event`), keyed on the function and the EventBridge event id.

    ``event`` may be passed by position or keyword; the Lambda context, when among the arguments, is registered so an
    invocation that times out frees its in-progress record when its time is up.
    """

    def wrap(func: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        signature = inspect.signature(func)
        name = f"{func.__module__}.{func.__qualname__}"

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> dict[str, Any]:
            bound = signature.bind(*args, **kwargs)
            if "event" not in bound.arguments:
                return func(*args, **kwargs)
            return once_per_event(
                event=bound.arguments["event"],
                name=name,
                work=lambda: func(*args, **kwargs),
                context=_lambda_context(args, kwargs),
            )

        return run

    return wrap
