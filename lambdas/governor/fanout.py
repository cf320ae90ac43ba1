"""Organisation mode: one scheduled sweep becomes one sweep per (account, region), fanned out on SQS.

The schedule invokes the sweeping function as before; in organisation mode its handler hands the Scheduled Event to
:func:`plan`, which lists the targets (the configured accounts, or the accounts of the spokes' OUs, plus the hub's
own, times the configured regions) and enqueues one message each on the function's own targets queue. The queue's
Lambda event source mapping (``maximum_concurrency`` bounds how many targets run at once; one message per
invocation) calls the same function with the message; :func:`consume` turns it into the target's own Scheduled Event
(``account`` and ``region`` of the target, a deterministic event id per round and target) and runs the function's
unchanged sweep there, through the spoke role (``adapters.aws.client(..., account=...)``).

Blast radius: each target keeps its own circuit breaker and rate limit (:class:`TargetLedger` keys the breaker per
account and region), and when breakers are open in ``breaker_targets`` or more targets at once, the organisation-wide
breaker holds every target of the round in report-only with one critical finding. Failures: a failed target is
retried by SQS (visibility timeout) up to ``attempts`` times; on its last attempt the failure is recorded and
published as an ``organization.sweep-failed`` finding instead of raised, so the message is done with and no target
ever waits for another. Only when even the finding cannot be published does the message go to the queue's DLQ.

Public functions, kept simple for the demo (``governor demo --accounts N --regions M``): :func:`targets`,
:func:`plan`, :func:`consume`, :func:`run_target`, :class:`FanoutConfig`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from pydantic import ConfigDict, Field, ValidationError

from governor import acts
from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND, LAST_SWEEP_KIND, Breaker
from governor.domain.decision import Decision, Finding
from governor.domain.ids import deterministic_id
from governor.domain.model import Model
from governor.domain.ports import Ledger, handling_event_from, target_key
from governor.observability import logger, metrics
from governor.outbox import Outbox
from governor.registry import REGISTRY

SCHEDULED = "Scheduled Event"
SCHEDULE_SOURCES = ("aws.scheduler", "aws.events")
#: The rule of the finding a target that failed every attempt becomes.
SWEEP_FAILED = "organization.sweep-failed"
#: The rule of the finding the organisation-wide breaker raises when it holds a round.
ORG_BREAKER = "organization.breaker-open"
#: Ledger kinds whose single item is one target's state: keyed per account and region inside a target's run.
PER_TARGET_KEYS = frozenset({BREAKER_KIND, LAST_SWEEP_KIND})
#: The sweeps whose runs flush stale outbox entries, and whose (None: every policy's); their planner flushes those
#: staged outside any target, since a target reads only its own.
STALE_FLUSHES: dict[str, str | None] = {
    c.name: (None if c.stale_outbox == "every" else c.name) for c in REGISTRY.values() if c.stale_outbox
}
#: The sweeps whose runs repair open act records; their planner repairs those no target owns, since a target reads
#: only its own (``governor.acts.repair_unowned``).
ACT_REPAIRS = frozenset(c.name for c in REGISTRY.values() if c.repairs_acts)
#: Sweeps made of parts (their Scheduled Event's ``detail.kinds``): every part, and the parts that concern
#: account-wide resources (IAM is global), which a target sweeps in the first configured region only; each
#: capability's registry entry declares its own (``sweep_parts``, ``account_wide_parts``).
SWEEP_PARTS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    c.name: (c.sweep_parts, c.account_wide_parts) for c in REGISTRY.values() if c.sweep_parts
}

_ACCOUNT = r"^\d{12}$"
_REGION = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]$"


class FanoutConfig(Model):
    """What the stack tells a sweeping function in organisation mode (``GOVERNOR_FANOUT``, JSON)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    queue_url: str = Field(min_length=1)
    regions: tuple[str, ...] = Field(min_length=1, max_length=40)
    home_account: str = Field(pattern=_ACCOUNT)
    #: Explicit accounts; when empty, the accounts of ``ou_ids`` (Organizations) are swept.
    accounts: tuple[str, ...] = Field((), max_length=5000)
    ou_ids: tuple[str, ...] = Field((), max_length=100)
    #: Deliveries of one target message (the queue's ``maxReceiveCount``); the last failure becomes a finding.
    attempts: int = Field(3, ge=1, le=10)
    #: Open per-target breakers that hold the whole round (the organisation-wide breaker).
    breaker_targets: int = Field(5, ge=1, le=10000)

    @classmethod
    def parse(cls, text: str | None) -> FanoutConfig | None:
        """``None`` when the variable is unset (single account, or a function that does not fan out)."""
        return None if not text else cls.model_validate(json.loads(text))


class Target(Model):
    """One message on the targets queue: sweep ``sweep`` in ``account`` / ``region`` for round ``round_id``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sweep: str = Field(pattern=r"^[a-z]{1,32}$")
    account: str = Field(pattern=_ACCOUNT)
    region: str = Field(pattern=_REGION)
    round_id: str = Field(min_length=1, max_length=128)
    time: dt.datetime
    #: The organisation-wide breaker is open: this round acts on nothing (report-only), it only records and reports.
    hold: bool = False
    #: The target's Scheduled Event detail (for a sweep made of parts, the parts to sweep here).
    detail: dict[str, Any] = Field(default_factory=dict)

    @property
    def event_id(self) -> str:
        """The same id for every delivery of this target in this round (idempotency, outbox and ledger key)."""
        return deterministic_id(self.round_id, self.sweep, self.account, self.region)

    def event(self) -> dict[str, Any]:
        """The target's own Scheduled Event: what the sweep would receive if it were deployed in that account."""
        return {
            "version": "0",
            "id": self.event_id,
            "detail-type": SCHEDULED,
            "source": "aws.scheduler",
            "account": self.account,
            "region": self.region,
            "time": self.time.isoformat().replace("+00:00", "Z"),
            "resources": [],
            "detail": dict(self.detail),
        }


class Accounts(Protocol):
    def accounts(self, parents: Sequence[str]) -> list[str]: ...


class Queue(Protocol):
    def send(self, bodies: Sequence[dict[str, Any]]) -> None: ...


def targets(
    sweep: str,
    accounts: Iterable[str],
    regions: Iterable[str],
    *,
    round_id: str,
    time: dt.datetime,
    hold: bool = False,
    parts: Sequence[str] | None = None,
) -> list[Target]:
    """Every (account, region) of a round, each once, accounts in order then regions: what :func:`plan` enqueues.

    For a sweep made of parts (:data:`SWEEP_PARTS`), each target names its parts (``parts``, or all), account-wide
    ones in the first region only; a region left with no part gets no target.
    """
    regions = list(dict.fromkeys(regions))
    details: dict[str, dict[str, Any]] = {r: {} for r in regions}
    if sweep in SWEEP_PARTS:
        every, account_wide = SWEEP_PARTS[sweep]
        chosen = [p for p in every if parts is None or p in parts]
        details = {r: {"kinds": [p for p in chosen if n == 0 or p not in account_wide]} for n, r in enumerate(regions)}
    return [
        Target(sweep=sweep, account=a, region=r, round_id=round_id, time=time, hold=hold, detail=details[r])
        for a in dict.fromkeys(accounts)
        for r in regions
        if details[r].get("kinds", True)
    ]


def is_schedule(event: Any) -> bool:
    """The schedule's own Scheduled Event: in organisation mode it plans a round instead of sweeping."""
    return (
        isinstance(event, dict)
        and event.get("detail-type") == SCHEDULED
        and event.get("source") in SCHEDULE_SOURCES
        and isinstance(event.get("id"), str)
    )


def is_target_batch(event: Any) -> bool:
    """An SQS batch from the event source mapping (only the targets queue is mapped to a sweeping function)."""
    records = event.get("Records") if isinstance(event, dict) else None
    return isinstance(records, list) and all(isinstance(r, dict) and r.get("eventSource") == "aws:sqs" for r in records)


def open_breakers(ledger: Ledger) -> list[str]:
    """The targets (``account#region``) whose own circuit breaker is open now."""
    found = []
    for item in ledger.query_kind(BREAKER_KIND):
        scope = item.get("target")
        if isinstance(scope, str) and Breaker.from_item(item).open:
            found.append(scope)
    return sorted(found)


def plan(
    event: Mapping[str, Any],
    runtime: Any,
    sweep: str,
    config: FanoutConfig,
    *,
    queue: Queue,
    organization: Accounts | None = None,
) -> dict[str, Any]:
    """Enqueue one target per (account, region) for this scheduled round; the organisation-wide breaker decides
    whether the round may act. Raises when the queue refuses targets (the schedule's retry enqueues again; duplicate
    targets are the same event id, so they run once)."""
    round_id = str(event["id"])
    time = _time(event.get("time"))
    accounts = list(config.accounts)
    if not accounts and config.ou_ids:
        if organization is None:
            raise RuntimeError("organisation fan-out: no account list and no Organizations client")
        accounts = organization.accounts(config.ou_ids)
    accounts = [config.home_account, *(a for a in accounts if a != config.home_account)]
    held = open_breakers(runtime.ledger) if sweep in REGISTRY and REGISTRY[sweep].breakers else []
    hold = len(held) >= config.breaker_targets
    detail = event.get("detail")
    parts = detail.get("kinds") if isinstance(detail, dict) and isinstance(detail.get("kinds"), list) else None
    planned = targets(sweep, accounts, config.regions, round_id=round_id, time=time, hold=hold, parts=parts)
    if hold:
        _hold_round(runtime, sweep, round_id, held, len(planned), config)
    queue.send([t.model_dump(mode="json") for t in planned])
    # Targets flush only the outbox entries they staged; what the hub staged outside any target (a held round's
    # finding, a click's) and earlier invocations left unsent goes out here, once a round.
    if sweep in STALE_FLUSHES:
        Outbox(runtime.ledger, runtime.sink, event_id=round_id).flush_stale(STALE_FLUSHES[sweep])
    if sweep in ACT_REPAIRS:
        acts.repair_unowned(runtime.ledger, now=dt.datetime.now(dt.UTC), event_id=round_id)
    metrics.add_metric(name="SweepTargetsPlanned", unit="Count", value=len(planned))
    logger.info("sweep fanned out", extra={"sweep": sweep, "targets": len(planned), "held": hold})
    return {
        "status": "planned",
        "event_id": round_id,
        "sweep": sweep,
        "targets": len(planned),
        "accounts": len(dict.fromkeys(accounts)),
        "regions": len(config.regions),
        "breaker": "open" if hold else "closed",
    }


def _hold_round(runtime: Any, sweep: str, round_id: str, held: list[str], count: int, config: FanoutConfig) -> None:
    decision = Decision(
        policy=sweep,
        verdict="act",
        resource="organization",
        reasons=[
            f"circuit breakers are open in {len(held)} account-regions ({', '.join(held[:10])}"
            f"{', ...' if len(held) > 10 else ''}), at least {config.breaker_targets}: every one of the {count} "
            "targets of this round is swept report-only, nothing is acted on"
        ],
        evidence={"open": held, "threshold": config.breaker_targets, "targets": count},
        severity="critical",
        rule=ORG_BREAKER,
    )
    runtime.ledger.record(decision, event_id=round_id)
    title = f"Organisation-wide {sweep} breaker open: {len(held)} account-regions tripped; nothing is acted on"
    box = Outbox(runtime.ledger, runtime.sink, event_id=round_id)
    box.resume()
    box.add([Finding.from_decision(decision, title, account=config.home_account, event_id=round_id)])
    box.flush()


def breaker_key(account: str, region: str) -> str:
    """The ledger key of one target's idle circuit breaker (kind ``idle-breaker``): what ``governor idle rearm``
    must write to re-arm the breaker of one account and region in organisation mode."""
    return f"{BREAKER_KEY}#{account}#{region}"


class TargetLedger:
    """The ledger as one target's sweep sees it: per-target state keyed by account and region, and the items it
    writes stamped with them so queries (marks, outbox) return only this target's (and unstamped) items."""

    def __init__(self, ledger: Ledger, account: str, region: str) -> None:
        self._ledger = ledger
        self.account = account
        self.region = region
        self.scope = target_key(account, region)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def _key(self, kind: str, key: str) -> str:
        return breaker_key(self.account, self.region) if kind in PER_TARGET_KEYS and key == BREAKER_KEY else key

    def record(self, decision: Decision, *, event_id: str, at: dt.datetime | None = None, held: bool = False) -> str:
        return self._ledger.record(decision, event_id=event_id, at=at, held=held)

    def record_many(self, decisions: Sequence[Decision], *, event_id: str, at: dt.datetime | None = None) -> list[str]:
        return self._ledger.record_many(decisions, event_id=event_id, at=at)

    def _stamped(self, item: dict[str, Any]) -> dict[str, Any]:
        return {**item, "target": self.scope}

    def put_item(self, kind: str, key: str, item: dict[str, Any]) -> None:
        self._ledger.put_item(kind, self._key(kind, key), self._stamped(item))

    def put_many(self, items: Iterable[tuple[str, str, dict[str, Any]]]) -> None:
        self._ledger.put_many((kind, self._key(kind, key), self._stamped(item)) for kind, key, item in items)

    def get_item(self, kind: str, key: str) -> dict[str, Any] | None:
        return self._ledger.get_item(kind, self._key(kind, key))

    def get_many(self, kind: str, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        wanted = {self._key(kind, key): key for key in keys}
        return {wanted[k]: item for k, item in self._ledger.get_many(kind, wanted).items()}

    def claim(self, kind: str, key: str, item: dict[str, Any], *, replacing: tuple[str, Any] | None = None) -> bool:
        return self._ledger.claim(kind, self._key(kind, key), self._stamped(item), replacing=replacing)

    def query_kind(self, kind: str, since: dt.datetime | None = None) -> list[dict[str, Any]]:
        return [i for i in self._ledger.query_kind(kind, since) if i.get("target") in (None, self.scope)]

    def query_own(self, kind: str, since: dt.datetime | None = None) -> list[dict[str, Any]]:
        """The items of ``kind`` this target's sweeps wrote (stamped ``target``, by this version or the one before),
        for state only a target's sweep writes (the idle marks): on DynamoDB the ``by-target`` index's partition of
        this target, so a target reads its own few items, not every item of the kind in the organisation as
        :meth:`query_kind` does. Unstamped items (written outside any target) are not read. A store without the
        index (the tests' in-memory ledger) is filtered."""
        scoped = getattr(self._ledger, "query_target", None)
        if scoped is not None:
            return list(scoped(kind, self.scope, since))
        return [i for i in self._ledger.query_kind(kind, since) if i.get("target") == self.scope]


Sweep = Callable[[dict[str, Any], Any], dict[str, Any]]


def _held_policy(policy: Any, sweep: str) -> Any:
    """The policy with the sweep's section report-only (the organisation-wide breaker holds the round)."""
    section = getattr(policy, sweep, None)
    if section is None or not hasattr(section, "enforce"):
        return policy
    return policy.model_copy(update={sweep: section.model_copy(update={"enforce": False})})


def target_runtime(runtime: Any, target: Target) -> Any:
    """The runtime a target's sweep runs with: its region, its view of the ledger, report-only when held."""
    policy = _held_policy(runtime.policy, target.sweep) if target.hold else runtime.policy
    return replace(
        runtime, region=target.region, ledger=TargetLedger(runtime.ledger, target.account, target.region), policy=policy
    )


def run_target(target: Target, runtime: Any, sweep: Sweep, *, attempt: int = 1, attempts: int = 1) -> dict[str, Any]:
    """Run one target's sweep; before the last attempt a failure raises (SQS delivers the message again), on the
    last one it is recorded and published as a finding, and the target counts as done."""
    scoped = target_runtime(runtime, target)
    try:
        return sweep(target.event(), scoped)
    except Exception as error:
        metrics.add_metric(name="SweepTargetFailures", unit="Count", value=1)
        logger.exception(
            "sweep target failed",
            extra={"sweep": target.sweep, "account": target.account, "region": target.region, "attempt": attempt},
        )
        if attempt < attempts:
            raise
        with handling_event_from(target.account, target.region):
            return failed(target, runtime, error, attempts)


def failed(target: Target, runtime: Any, error: BaseException, attempts: int) -> dict[str, Any]:
    """A target that failed every attempt: one decision in the ledger and one finding on the bus, in its account."""
    why = f"{error.__class__.__name__}: {error}"[:500]
    decision = Decision(
        policy=target.sweep,
        verdict="act",
        resource=f"{target.account}/{target.region}",
        reasons=[
            f"the {target.sweep} sweep of account {target.account} in {target.region} failed {attempts} time(s), "
            f"last with {why}; nothing there was judged this round, the other accounts were swept"
        ],
        evidence={"status": "sweep-failed", "attempts": attempts, "error": why, "round": target.round_id},
        severity="warning",
        rule=SWEEP_FAILED,
    )
    runtime.ledger.record(decision, event_id=target.event_id)
    title = f"{target.sweep.capitalize()} sweep failed in account {target.account} ({target.region})"
    box = Outbox(runtime.ledger, runtime.sink, event_id=target.event_id)
    box.resume()
    box.add(
        [Finding.from_decision(decision, title, account=target.account, region=target.region, event_id=target.event_id)]
    )
    box.flush()
    return {"status": "failed", "event_id": target.event_id, "account": target.account, "region": target.region}


def consume(event: Mapping[str, Any], runtime: Any, sweep: Sweep, *, attempts: int) -> dict[str, Any]:
    """An SQS batch from the targets queue: each record one target; failures reported per item (partial batch)."""
    failures: list[dict[str, str]] = []
    results: list[dict[str, Any]] = []
    for record in event.get("Records", []):
        message_id = str(record.get("messageId", ""))
        try:
            target = Target.model_validate_json(str(record.get("body", "")))
        except ValidationError as error:
            # A message the planner did not write: dropped with the reason (it can never succeed).
            logger.error("sweep target rejected", extra={"message_id": message_id, "reason": str(error)[:500]})
            metrics.add_metric(name="InvalidEvents", unit="Count", value=1)
            runtime.dead_letters.send(dict(record), f"not a sweep target: {str(error)[:300]}")
            continue
        attempt = int((record.get("attributes") or {}).get("ApproximateReceiveCount", "1") or 1)
        try:
            results.append(run_target(target, runtime, sweep, attempt=attempt, attempts=attempts))
        except Exception:
            failures.append({"itemIdentifier": message_id})
    return {"batchItemFailures": failures, "results": results}


def dispatch(
    event: Any,
    runtime: Any,
    sweep_name: str,
    sweep: Sweep,
    *,
    queue: Callable[[FanoutConfig], Queue] | None = None,
    organization: Callable[[], Accounts] | None = None,
) -> dict[str, Any] | None:
    """The sweeping handlers' organisation branch: plan a scheduled round, or run a batch of targets. ``None`` when
    organisation fan-out is off or the event is neither (the handler goes on as in a single account)."""
    config: FanoutConfig | None = runtime.extras.get("fanout")
    if config is None:
        return None
    if is_target_batch(event):
        return consume(event, runtime, sweep, attempts=config.attempts)
    if is_schedule(event):
        from governor.adapters.organization import OrganizationAccounts, TargetQueue

        sender = queue(config) if queue else TargetQueue(config.queue_url, runtime.region)
        accounts: Accounts | None = None
        if organization is not None:
            accounts = organization()
        elif config.ou_ids and not config.accounts:
            accounts = OrganizationAccounts(runtime.region)
        return plan(event, runtime, sweep_name, config, queue=sender, organization=accounts)
    return None


def _time(value: object) -> dt.datetime:
    if isinstance(value, str) and value:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    return dt.datetime.now(dt.UTC)
