"""What an operator does after an incident, as docs/reliability.md's runbook says, run against the harness's deployment.

1. ``governor dlq replay FUNCTION`` for every function whose DLQ holds something: every parked message re-delivered
   once, through :class:`governor_cli.dlq_admin.DlqAdmin.replay` itself (the command's code: it reads the queue,
   parses each shape, invokes the function asynchronously and deletes the message once Lambda took it). The
   harness stands in for Lambda's ``Invoke``: the event goes through :meth:`Deployment.deliver` (retries, then the
   DLQ again), and what fails again is parked once the replay has read the queue, as Lambda's retries would.
2. One idle sweep more than :data:`governor.outbox.STALE_AFTER` later: the schedule every deployment runs, whose
   stale flush publishes what any function staged and never got accepted.

The faults are off by then (the incident is over, the configuration fixed). What is still parked, or still staged
unsent, after this is lost: nothing else will ever deliver it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from typing import Any

from governor_cli.testing.deployment import Delivery, Deployment
from governor_cli.testing.faults import FaultInjector

#: Label prefix of the runbook's own sweep (its calls belong to no case).
SWEEP_LABEL = "runbook-sweep"
#: How long after the incident the operator replays the dead-letter queues.
REPLAY_AFTER = dt.timedelta(minutes=5)


class ReplayedLambda:
    """The part of the Lambda client ``DlqAdmin.replay`` uses: an asynchronous ``Invoke`` of the governor function,
    made by ``deliver`` (Lambda's retries, without parking: what fails again is parked after the replay)."""

    def __init__(
        self,
        deliver: Callable[[str, Any], Delivery],
        delivered: Callable[[Any, Delivery], None] | None = None,
    ) -> None:
        self.deliver = deliver
        self.delivered = delivered
        self.failed: list[tuple[str, Any, BaseException | None]] = []

    def invoke(self, *, FunctionName: str, InvocationType: str, Payload: bytes) -> dict[str, Any]:
        event = json.loads(Payload)
        delivery = self.deliver(FunctionName, event)
        if delivery.status == "dlq":
            self.failed.append((FunctionName, event, RuntimeError(delivery.reason or "failed")))
        if self.delivered is not None:
            self.delivered(event, delivery)
        return {"StatusCode": 202}


def replay_all(
    deployment: Deployment,
    functions: Iterable[str],
    injector: FaultInjector | None = None,
    *,
    label_of: Callable[[Any], str] = lambda event: "runbook-replay",
    delivered: Callable[[Any, Delivery], None] | None = None,
    deliver: Callable[[str, Any], Delivery] | None = None,
) -> int:
    """``governor dlq replay F`` for every function: each message parked now re-delivered once. Returns how many.
    ``deliver`` makes one asynchronous delivery without parking (default: :meth:`Deployment.deliver` now)."""
    from governor_cli.dlq_admin import DlqAdmin
    from governor_cli.testing.faults import unlabelled

    def now(function: str, event: Any) -> Delivery:
        return deployment.deliver(function, event, park=False, injector=injector, label=label_of(event))

    total = 0
    for function in sorted(set(functions)):
        shim = ReplayedLambda(deliver or now, delivered)
        with unlabelled():  # the operator's own SQS calls are not the code under test
            queue = deployment.local.dlq_urls[function]
            parked = [letter.message_id for letter in DlqAdmin(deployment.region, wait_seconds=0).peek(queue)]
            if not parked:
                continue
            admin = DlqAdmin(deployment.region, lambda_client=shim, wait_seconds=0)
            results = admin.replay(queue, function, set(parked))
        total += len(results)
        for name, event, error in shim.failed:  # Lambda's retries ran out again: back in the DLQ
            deployment._park(name, event, error)
    return total


def flush_sweep(deployment: Deployment, at: dt.datetime, injector: FaultInjector | None = None) -> Delivery:
    """One scheduled idle sweep judged at ``at`` (the idle function's clock), as the schedule delivers it."""
    from governor_cli.testing.events import scheduled
    from governor_cli.testing.idle_clock import clocked_idle
    from governor_cli.testing.scenarios import ACCOUNT

    with clocked_idle(at):
        return deployment.deliver(
            "idle", scheduled(account=ACCOUNT, region=deployment.region, time=at), injector=injector, label=SWEEP_LABEL
        )


def follow(
    deployment: Deployment,
    functions: Iterable[str],
    injector: FaultInjector | None = None,
    *,
    label_of: Callable[[Any], str] = lambda event: "runbook-replay",
    delivered: Callable[[Any, Delivery], None] | None = None,
    now: dt.datetime | None = None,
) -> int:
    """The whole runbook with the faults off: replay every DLQ once, then one sweep past the stale age."""
    import time_machine

    from governor.outbox import STALE_AFTER

    if injector is not None:
        injector.rate = 0.0  # the incident is over: the harness still records every call, fails none
    start = now or dt.datetime.now(dt.UTC)
    # An operator replays after the incident, minutes after the last of Lambda's retries, not within the second the
    # harness's compressed retries end: by then a dead attempt's checkpoint claim (domain/once.TAKEOVER_AFTER) and
    # Powertools' in-progress records have expired, as they would have for Lambda's own retries at +1 and +2 min.
    with time_machine.travel(start + REPLAY_AFTER, tick=True):
        replayed = replay_all(deployment, functions, injector, label_of=label_of, delivered=delivered)
    at = start + REPLAY_AFTER + STALE_AFTER + dt.timedelta(minutes=1)
    flush_sweep(deployment, at.replace(microsecond=0), injector)
    return replayed
