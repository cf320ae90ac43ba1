"""The generic runner: every function's record → act → record outcome → publish, and its idempotency on the event id.

``Run.settle`` is the one act path of the network, keys, idle and Spot functions: the decision is recorded, its finding
staged in the outbox (unsent) before anything changes, the resource re-read right before acting (the action goes
ahead only if the state that justified it still holds), each enforced action executed through the capability's
adapters (``Action.execute``), each outcome recorded in the ledger in one shape (``action`` items, and the decision
again with ``evidence.done``), the finding restaged to say what was done, and published through the outbox. What
differs between capabilities is passed in as small callbacks: how the finding reads, what the re-read checks, what
an action may not do in this run (the keys budget, a checkpoint already sent), and whether a failed call stops the
decision (network, keys) or is reported and the rest carried on (Spot recovery).

``once_per_event`` is the shared entry every side-effecting handler calls: Powertools Idempotency as documented,
one ``IdempotencyConfig`` keyed on the EventBridge event id and one ``DynamoDBPersistenceLayer`` on the stack's table,
applied with ``idempotent_function(data_keyword_argument="event")``.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from governor import acts
from governor.domain import rereads
from governor.domain.actions import Acting, Outcome
from governor.domain.decision import Action, Decision, Finding
from governor.domain.ports import Ledger, watching_parks
from governor.domain.verification import Verification, combined
from governor.observability import logger
from governor.outbox import Outbox
from governor.policy import Policy

#: Ledger kind of an action's outcome: one item per executed action, the same shape for every capability.
ACTION_KIND = acts.ACTION_KIND
#: How long a handled event is remembered (a duplicate within it returns the first result).
IDEMPOTENCY_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Hold:
    """The re-read says the action must not go ahead: why, and the decision to record instead (if any)."""

    why: str
    record: Decision | None = None


@dataclass(frozen=True)
class Go:
    """The re-read says the state that justified the action still holds; ``live`` is what was read."""

    live: Any = None


Gate = Go | Hold


@dataclass
class Settled:
    """What one decision came to: the outcome of each action taken, the sentences a finding reports, the finding."""

    decision: Decision
    results: list[tuple[Action, Outcome]] = field(default_factory=list)
    held: Hold | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def done(self) -> list[str]:
        if self.held is not None:
            return [self.held.why]
        return [outcome.done for _, outcome in self.results if outcome.done]

    @property
    def verified(self) -> Verification | None:
        """What the re-reads after the fixing actions saw, together: fixed only if every one of them saw its fix."""
        return verification_of(self.results)

    def summary(self) -> dict[str, Any]:
        return {"resource": self.decision.resource, "verdict": self.decision.verdict, "done": self.done}


def verification_of(results: Sequence[tuple[Action, Outcome]]) -> Verification | None:
    """The decision's verification from its fixing actions' outcomes (None when no fixing action was taken)."""
    return combined(
        (action.type, outcome.ok, outcome.verified, f"{outcome.error_code or ''}: {outcome.message}".strip(": "))
        for action, outcome in results
        if action.FIXES
    )


def verified_findings(found: list[Finding], decision: Decision, verified: Verification | None) -> list[Finding]:
    """The findings about ``decision``'s own problem (its resource and rule), carrying what the re-read after acting
    saw; other findings of the decision (a refused action's own finding) are left as they are."""
    if verified is None:
        return found
    rule = decision.rule or decision.policy
    return [
        f.model_copy(update={"verified": verified}) if f.resource == decision.resource and f.rule == rule else f
        for f in found
    ]


@dataclass
class Later:
    """Outcome records a caller writes together after acting on many resources (a sweep's tags): the action items
    and the decisions with what was done, in one batched write (``Ledger.put_many`` / ``record_many``).

    Only for acts whose record may be lost with nothing but a repeat to pay: a crash before :meth:`write` leaves the
    act unrecorded, and the retry does it again. A stop, a terminate or a command is recorded the moment it is done.
    """

    items: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    decisions: dict[str, list[Decision]] = field(default_factory=dict)  # event id -> decisions, in order

    def write(self, ledger: Ledger) -> None:
        """Action items first, then the decisions that cite them (the order single writes would have)."""
        items, decisions = self.items, self.decisions
        self.items, self.decisions = [], {}
        ledger.put_many(items)
        for event_id, batch in decisions.items():
            ledger.record_many(batch, event_id=event_id)


#: Builds a decision's findings; ``results`` is None before anything was acted on (the staged, unsent version).
FindingsOf = Callable[[Decision, Sequence[tuple[Action, Outcome]] | None], list[Finding]]
#: Re-reads the resource right before acting.
Reread = Callable[[Decision], Gate]
#: An outcome to use instead of executing the action (not in this run's budget, already done by an earlier attempt).
Before = Callable[[Action], Outcome | None]


@dataclass
class Run:
    """One invocation's act path: the event, where outcomes are recorded and findings staged, the capability's
    adapters. ``at`` stamps the ledger entries (the handler's clock); ``label`` names a command this run sends."""

    event_id: str
    ledger: Ledger
    policy: Policy
    aws: Any
    outbox: Outbox | None = None
    at: dt.datetime | None = None
    label: str = ""
    intent: str | None = None  # at-most-once scope of a non-idempotent call when wider than the event (Acting.intent)
    later: Later | None = None  # outcome records left to the caller's batched write (see ``Later``)

    def settle(
        self,
        decision: Decision,
        *,
        findings: FindingsOf | None = None,
        reread: Reread | None = None,
        before: Before | None = None,
        after: Callable[[Action, Outcome], None] | None = None,
        contain: Callable[[Action], bool] | None = None,
        recorded: bool = False,
        live: Any = None,
    ) -> Settled:
        """Record ``decision``, stage its findings, re-read, execute its enforced actions, record and report them.

        A failed call is recorded and reported, then re-raised so Lambda retries (for the actions ``contain`` accepts
        it is a failed outcome instead, and the other actions still run). ``recorded`` when the caller already
        recorded the decision (a sweep records in batches); ``live`` is the resource as the caller read it right
        before deciding, when no ``reread`` is needed.
        """
        ledger, outbox, event_id, at = self.ledger, self.outbox, self.event_id, self.at
        if not recorded:
            ledger.record(decision, event_id=event_id, at=at)
        settled = Settled(decision)
        staged = _stage(outbox, findings(decision, None)) if findings and outbox else []
        enforced = [action for action in decision.enforced_actions() if not action.BY_RUNTIME]
        gate: Gate = reread(decision) if reread and enforced else Go(live)
        if isinstance(gate, Hold):
            return self._hold(settled, gate, enforced, staged)
        acting = Acting(
            event_id,
            decision.resource,
            self.policy,
            ledger=ledger,
            live=gate.live,
            label=self.label,
            intent=self.intent,
        )
        # Acts whose records a sweep batches (``later``) write no intent: a lost record costs only a repeat.
        intents = acts.Intents(ledger, decision, event_id, at) if self.later is None else None
        try:
            for action in enforced:
                outcome = before(action) if before else None
                if outcome is None:
                    outcome = self._execute(action, acting, intents, decision, settled, findings, staged, contain)
                self._recorded(settled, action, outcome, after)
            self._record_done(settled, intents)
        except Exception as error:
            _carry_done(error, settled)
            raise
        if findings and outbox:
            settled.findings = _restage(outbox, staged, self._found(findings, settled))
        return settled

    @staticmethod
    def _found(findings: FindingsOf, settled: Settled) -> list[Finding]:
        """The decision's findings after acting, its own carrying what the re-read after acting saw."""
        return verified_findings(findings(settled.decision, settled.results), settled.decision, settled.verified)

    def _recorded(
        self, settled: Settled, action: Action, outcome: Outcome, after: Callable[[Action, Outcome], None] | None
    ) -> None:
        settled.results.append((action, outcome))
        _record_outcome(self.ledger, settled.decision, action, outcome, self.event_id, self.later)
        if after:
            after(action, outcome)

    def _hold(self, settled: Settled, gate: Hold, enforced: list[Action], staged: list[Finding]) -> Settled:
        """The re-read held the action back: record why instead (see :class:`Hold`)."""
        decision, event_id = settled.decision, self.event_id
        settled.held = gate
        if gate.record is not None:
            # The "act" entry recorded before claims an action the re-read held back: the hold replaces it, unless
            # an earlier attempt of this event already acted (its outcome is recorded) and this is its retry.
            acted = any(self.ledger.get_item(ACTION_KIND, _action_key(decision, event_id, a)) for a in enforced)
            self.ledger.record(gate.record, event_id=event_id, at=self.at, held=not acted)
        settled.findings = staged
        return settled

    def _record_done(self, settled: Settled, intents: acts.Intents | None) -> None:
        """The decision again with what was done (``evidence.done``), then its intents completed."""
        decision = settled.decision
        if settled.done:
            done = decision.model_copy(update={"evidence": {**decision.evidence, "done": settled.done}})
            if self.later is not None:
                self.later.decisions.setdefault(self.event_id, []).append(done)
            else:
                self.ledger.record(done, event_id=self.event_id, at=self.at)
        if intents is not None:
            intents.complete()

    def _execute(
        self,
        action: Action,
        acting: Acting,
        intents: acts.Intents | None,
        decision: Decision,
        settled: Settled,
        findings: FindingsOf | None,
        staged: list[Finding],
        contain: Callable[[Action], bool] | None,
    ) -> Outcome:
        """The call, its intent written first. A failed call is recorded and reported, then re-raised so Lambda
        retries; for an action ``contain`` accepts it is a failed outcome instead."""
        if intents is not None:
            intents.intend(action)
        try:
            outcome = action.execute(self.aws, acting)
        except Exception as error:
            outcome = Outcome(
                ok=False,
                error_code=error.__class__.__name__,
                message=f"{action.type}: {error}",
                done=f"{action.type} failed: {error}",
            )
            if contain and contain(action):
                return outcome
            logger.exception("action failed", extra={"event_id": self.event_id, "resource": decision.resource})
            settled.results.append((action, outcome))
            _record_outcome(self.ledger, decision, action, outcome, self.event_id, self.later)
            if findings and self.outbox:
                settled.findings = _restage(self.outbox, staged, self._found(findings, settled))
            raise
        return _reread_after(action, outcome, self.aws, acting)


def _carry_done(error: Exception, settled: Settled) -> None:
    """What was done before ``error`` travels with it (``acts.DONE_ATTR``): the caller's failure record says
    "stopped; failed: ..." instead of "failed" when the act happened and a later write failed."""
    made = [outcome.done for _, outcome in settled.results if outcome.ok and outcome.done]
    if made and not getattr(error, acts.DONE_ATTR, None):
        setattr(error, acts.DONE_ATTR, made)


def _reread_after(action: Action, outcome: Outcome, aws: Any, acting: Acting) -> Outcome:
    """Accepted is not fixed: an action AWS accepted is followed by a re-read of the resource, and its outcome says
    what is there now (``governor.domain.rereads``); a refused one is left as it is."""
    return replace(outcome, verified=rereads.after(action, aws, acting)) if outcome.ok else outcome


def _action_key(decision: Decision, event_id: str, action: Action) -> str:
    return acts.action_key(decision, event_id, action)


def _record_outcome(
    ledger: Ledger, decision: Decision, action: Action, outcome: Outcome, event_id: str, later: Later | None = None
) -> None:
    item = acts.outcome_item(decision, action, outcome, event_id)
    if later is not None:
        later.items.append((ACTION_KIND, _action_key(decision, event_id, action), item))
    else:
        ledger.put_item(ACTION_KIND, _action_key(decision, event_id, action), item)


def _stage(outbox: Outbox, findings: list[Finding]) -> list[Finding]:
    return outbox.add(findings) if findings else []


def _restage(outbox: Outbox, staged: list[Finding], final: list[Finding]) -> list[Finding]:
    """The staged findings, now saying what was done (same ids, still unsent); findings new since staging are added."""
    kept: list[Finding] = []
    for before_, after_ in zip(staged, final, strict=False):
        updated = after_.model_copy(update={"id": before_.id})
        if updated.model_copy(update={"at": before_.at}) != before_:  # what the bus sends is what the outbox holds
            outbox.stage(updated)
        else:
            updated = before_
        kept.append(updated)
    return kept + _stage(outbox, final[len(staged) :])


# --- idempotency -------------------------------------------------------------------------------------------------

_lock = threading.Lock()


@cache
def _config() -> Any:
    """The one configuration: keyed on the EventBridge event id, remembered 24 hours."""
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig

    return IdempotencyConfig(
        event_key_jmespath="id", expires_after_seconds=IDEMPOTENCY_SECONDS, raise_on_no_idempotency_key=False
    )


@cache
def _persistence(table: str, region: str | None, endpoint: str | None, name: str) -> Any:
    """The function's persistence layer on the stack's table, on the runtime's shared DynamoDB client (no second
    Session). One per function name: Powertools keeps the key prefix on the layer, so two functions sharing one
    process (the test harness) must not share it."""
    from governor.adapters.aws import client

    return _layer_class()(table_name=table, boto3_client=client("dynamodb", region, endpoint))


#: The attribute naming the invocation that wrote an in-progress idempotency record (a fresh token per write).
HOLDER_ATTR = "holder"


@cache
def _layer_class() -> type:
    """Powertools' DynamoDB layer, knowing its own in-progress write when botocore resends it.

    The in-progress PutItem is conditional. When DynamoDB executed it but its answer was lost (a read timeout),
    botocore sends the same request again; the condition now fails on the record this invocation just wrote, and
    Powertools raises ``IdempotencyAlreadyInProgressError`` against itself: the invocation fails, and every retry
    until the record's in-progress expiry (the function's deadline) fails the same way, so the event ends parked with
    nothing done (the soak's "read timeouts" rows). The write here is Powertools' own item and condition (3.37) plus a
    fresh token (:data:`HOLDER_ATTR`), asking DynamoDB for the item that failed the condition: when it carries this
    write's token, the write stands and the work runs. Any other conflict is left to Powertools' own ``_put_record``
    (one more conditional PutItem), which raises what it always raised; a concurrent duplicate never matches."""
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
    from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS
    from botocore.exceptions import ClientError

    class Layer(DynamoDBPersistenceLayer):
        def _put_record(self, data_record: Any) -> None:
            token = uuid.uuid4().hex
            item: dict[str, Any] = {
                **self._get_key(data_record.idempotency_key),
                self.expiry_attr: {"N": str(data_record.expiry_timestamp)},
                self.status_attr: {"S": data_record.status},
                HOLDER_ATTR: {"S": token},
            }
            if data_record.in_progress_expiry_timestamp is not None:
                item[self.in_progress_expiry_attr] = {"N": str(data_record.in_progress_expiry_timestamp)}
            if self.payload_validation_enabled and data_record.payload_hash:
                item[self.validation_key_attr] = {"S": data_record.payload_hash}
            now = dt.datetime.now()  # as Powertools computes it
            try:
                self.client.put_item(
                    TableName=self.table_name,
                    Item=item,
                    ConditionExpression=(
                        "attribute_not_exists(#id) OR #expiry < :now OR "
                        "(#status = :inprogress AND attribute_exists(#in_progress_expiry) "
                        "AND #in_progress_expiry < :now_in_millis)"
                    ),
                    ExpressionAttributeNames={
                        "#id": self.key_attr,
                        "#expiry": self.expiry_attr,
                        "#in_progress_expiry": self.in_progress_expiry_attr,
                        "#status": self.status_attr,
                    },
                    ExpressionAttributeValues={
                        ":now": {"N": str(int(now.timestamp()))},
                        ":now_in_millis": {"N": str(int(now.timestamp() * 1000))},
                        ":inprogress": {"S": STATUS_CONSTANTS["INPROGRESS"]},
                    },
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise
                found = error.response.get("Item") or {}
                if (found.get(HOLDER_ATTR) or {}).get("S") == token:
                    logger.info("idempotency record written by this invocation (its first answer was lost)")
                    return
                super()._put_record(data_record)  # Powertools' own answer to the conflict

    return Layer


class _Parked(Exception):
    """Raised through Powertools when the work parked something in its DLQ: Powertools then deletes the idempotency
    record instead of completing it, so ``governor dlq replay`` runs the work again (with the configuration fixed in
    between) instead of getting the stored result. Caught in :func:`once_per_event`; never reaches Lambda."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("parked")
        self.result = result


def _enter(*, event: Any, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    with watching_parks() as parked:
        result = work()
    if parked:
        raise _Parked(result)
    return result


@cache
def _guarded(table: str, region: str | None, endpoint: str | None, name: str) -> Callable[..., dict[str, Any]]:
    from aws_lambda_powertools.utilities.idempotency import idempotent_function

    guarded: Callable[..., dict[str, Any]] = idempotent_function(
        data_keyword_argument="event",
        persistence_store=_persistence(table, region, endpoint, name),
        config=_config(),
        key_prefix=name,
    )(_enter)
    return guarded


@dataclass(frozen=True)
class _Bounded:
    """The Lambda context as Powertools sees it for a time-bound action: at most ``cap_ms`` remaining.

    Powertools sets an in-progress record's expiry to the invocation's remaining time. For Spot (180 s timeout, a
    two-minute warning) a record whose write answer was lost would block every retry, Lambda's first included (about a
    minute later), until the warning is over. A shorter expiry lets that retry run; a retry that overlaps a live
    invocation is harmless, since the non-idempotent call is claimed by name first (``domain/once.py``)."""

    context: Any
    cap_ms: int

    def get_remaining_time_in_millis(self) -> int:
        return max(1, min(int(self.context.get_remaining_time_in_millis()), self.cap_ms))


def once_per_event(
    *,
    event: Any,
    name: str,
    work: Callable[[], dict[str, Any]],
    context: Any = None,
    in_progress_seconds: int | None = None,
) -> dict[str, Any]:
    """Run ``work`` once per event id for the function ``name``: a duplicate delivery returns the first result, a
    concurrent one raises ``IdempotencyAlreadyInProgressError`` (Lambda retries it later), a failed run is forgotten,
    and a run that parked something in its DLQ is not remembered (so ``governor dlq replay`` re-runs it).

    The table is read from the environment when called; without one (unit tests, ``explain``) ``work`` runs
    unwrapped. With the Lambda context, an invocation that times out frees its in-progress record when its time is up,
    or after ``in_progress_seconds`` for a time-bound action (Spot), whichever comes first.
    """
    table = os.environ.get("IDEMPOTENCY_TABLE")
    if not table:
        return work()
    with _lock:
        guarded = _guarded(table, os.environ.get("AWS_REGION"), os.environ.get("AWS_ENDPOINT_URL"), name)
        if context is not None and callable(getattr(context, "get_remaining_time_in_millis", None)):
            seen = _Bounded(context, in_progress_seconds * 1000) if in_progress_seconds else context
            _config().register_lambda_context(seen)
    finished: list[dict[str, Any]] = []

    def tracked() -> dict[str, Any]:
        result = work()
        finished.append(result)
        return result

    try:
        return guarded(event=event, work=tracked)
    except _Parked as parked:  # the invocation succeeded; only its idempotency record is not kept
        return parked.result
    except Exception as error:
        if not _bookkeeping_failed(error):
            raise
        store = _persistence(table, os.environ.get("AWS_REGION"), os.environ.get("AWS_ENDPOINT_URL"), name)
        return _settle_record(store, event, finished, error)


def _bookkeeping_failed(error: BaseException) -> bool:
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyPersistenceLayerError

    return isinstance(error, IdempotencyPersistenceLayerError) and not str(error).startswith(
        "Failed to save in progress record"
    )


def _settle_record(store: Any, event: Any, finished: list[dict[str, Any]], error: Exception) -> dict[str, Any]:
    """Powertools could not complete (or delete) the idempotency record after the work ran: the record stays "in
    progress" until the invocation's deadline, so every retry Lambda makes before then, and ``governor dlq replay``,
    would fail with ``IdempotencyAlreadyInProgressError`` and the event would end parked for good (the soak's "access
    denied" and "read timeouts" rows). The write gets one more attempt here; then:

    * the work finished and was to be remembered: its result is returned whatever the second write did. The job is
      done; failing the invocation would only make Lambda retry into the stuck record and park a finished event. A
      duplicate after the deadline runs the work again, which every handler tolerates (ledger conditions, claimed
      sends).
    * the work failed, or parked something (its record must go so a replay runs it): the record is deleted, then the
      work's own error is raised (Lambda retries; the DLQ names the real reason), or the parked run's result returned.
    """
    saving = str(error).startswith("Failed to update record state to success")
    if saving and finished:
        try:
            store.save_success(data=event, result=finished[-1])
        except Exception as again:
            logger.error("idempotency record not completed; the work is done", extra={"error": str(again)})
        return finished[-1]
    failed = error.__cause__.__context__ if error.__cause__ is not None else None  # the work's own exception
    try:
        store.delete_record(data=event, exception=failed or error)
    except Exception as again:
        logger.error("idempotency record not released; retries wait for its expiry", extra={"error": str(again)})
        raise error from again
    if isinstance(failed, _Parked):
        return failed.result
    if isinstance(failed, Exception):
        raise failed
    raise error
