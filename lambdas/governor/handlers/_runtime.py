"""What every handler shares: its environment, its adapters, and the parse-at-the-edge / idempotency wrapper.

Only this module and ``cli.py`` read the environment. Adapters are built once per container and reused.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from governor.domain.ports import DeadLetters, FindingSink, Ledger, handling_event_from
from governor.events.envelopes import InvalidEventError
from governor.observability import logger, metrics
from governor.policy import Policy, PolicyError, parse_policy

T = TypeVar("T")


class HandlerEnvironment(BaseModel):
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

        client.configure(Organization(env.spoke_role, env.home_account))
    return Runtime(
        policy=policy,
        ledger=DynamoLedger(env.ledger_table, policy.ledger.retention_days, env.region),
        sink=EventBusSink(env.bus_name, env.region),
        dead_letters=SqsDeadLetters(env.dlq_url, env.region),
        region=env.region,
        extras=extras,
    )


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


def _lambda_context(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The Lambda context among a call's arguments, if any (it tells Powertools when an in-progress record expires)."""
    for value in (*args, *kwargs.values()):
        if callable(getattr(value, "get_remaining_time_in_millis", None)):
            return value
    return None


def idempotent_on_event_id() -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    """Powertools Idempotency keyed on the EventBridge event id, when the stack gave an idempotency table.

    A duplicate delivery returns the first result without acting again; a concurrent duplicate raises
    ``IdempotencyAlreadyInProgressError`` so Lambda retries it later. The table is read from the environment at call
    time (not import time) and the DynamoDB client is the runtime's shared one (``adapters.aws``); without
    a table (unit tests, ``explain``) the function runs unwrapped. ``event`` may be passed by position or keyword.
    When the Lambda context is among the arguments, an invocation that dies mid-way (timeout) frees its in-progress
    record when its time is up instead of blocking retries for the whole expiry period.
    """

    def wrap(func: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        signature = inspect.signature(func)
        key_prefix = f"{func.__module__}.{func.__qualname__}"
        guarded: dict[tuple[str, str | None, str | None], tuple[Any, Callable[..., dict[str, Any]]]] = {}
        lock = threading.Lock()

        def guard(table: str) -> tuple[Any, Callable[..., dict[str, Any]]]:
            from aws_lambda_powertools.utilities.idempotency import (
                DynamoDBPersistenceLayer,
                IdempotencyConfig,
                idempotent_function,
            )

            from governor.adapters.aws import client

            key = (table, os.environ.get("AWS_REGION"), os.environ.get("AWS_ENDPOINT_URL"))
            with lock:
                if key not in guarded:
                    config = IdempotencyConfig(
                        event_key_jmespath="id", expires_after_seconds=24 * 3600, raise_on_no_idempotency_key=False
                    )
                    # The runtime's shared client (bounded retries): no second Session on the first invocation.
                    persistence = DynamoDBPersistenceLayer(
                        table_name=table, boto3_client=client("dynamodb", key[1], key[2])
                    )

                    def call(*, event: Any, thunk: Callable[[], dict[str, Any]]) -> dict[str, Any]:
                        return thunk()

                    guarded[key] = (
                        config,
                        idempotent_function(
                            data_keyword_argument="event",
                            persistence_store=persistence,
                            config=config,
                            key_prefix=key_prefix,
                        )(call),
                    )
                return guarded[key]

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> dict[str, Any]:
            table = os.environ.get("IDEMPOTENCY_TABLE")
            if not table:
                return func(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            if "event" not in bound.arguments:
                return func(*args, **kwargs)
            config, call = guard(table)
            context = _lambda_context(args, kwargs)
            if context is not None:
                config.register_lambda_context(context)
            return call(event=bound.arguments["event"], thunk=lambda: func(*args, **kwargs))

        return run

    return wrap
