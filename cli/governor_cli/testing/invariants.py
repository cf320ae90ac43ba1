"""Run a mix of cases through the deployed handlers and check the reliability invariants against a clean run.

For every case of a faulty run, compared with the same case in a fault-free run on a fresh emulator:

* it ended either handled (acted exactly as the clean run did: same actions, each once, however many deliveries,
  retries and duplicates) or in its function's DLQ with a reason; never neither ("lost");
* nothing was done outside the policy: no action the clean run did not take, none on a forbidden resource;
* the ledger holds exactly the clean run's decisions for it, once each.

An action is a change the governor makes (not its own ledger, bus, DLQ or idempotency writes), counted per API call
that reached the service; ``resent`` counts calls botocore re-sent after the service had executed an attempt whose
response was lost (a read timeout): the transport's at-least-once, visible only for non-idempotent APIs.

Findings are followed by their deterministic id (``governor.outbox``): a finding is published when a PutEvents call
carrying it reached the bus without being refused; it is lost when the clean run published a finding for the case
and the faulty run neither published one nor holds one unsent in the outbox (whence a retry or a sweep publishes it).
``resent_non_idempotent`` counts extra executions of calls without a client token whose repetition is a second
effect (``SendCommand``, ``RotateKeyOnDemand``), whether botocore or a retried invocation resent them.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from governor_cli.testing.deployment import Delivery, Deployment
from governor_cli.testing.faults import ApiCall, FaultInjector
from governor_cli.testing.scenarios import Case

PLUMBING_SERVICES = {"dynamodb"}
#: ``RespondToClick`` updates the clicked Slack message through its response_url: best effort by design (a failure is
#: logged, the recorded action stands), replacing the message, so neither a repeat nor a miss is an action's.
PLUMBING_OPERATIONS = {"PutEvents", "SendMessage", "SendMessageBatch", "PutMetricData", "RespondToClick"}
#: Deliveries that have no idempotency key on the wire: a Slack webhook post, an SES email, Lambda's asynchronous
#: Invoke (the click's hand-over, Stop now to idle). Once the sender lost the answer (or lost the record that it was
#: done), sending again is the only way not to lose the message; the receiver may get it twice. Counted apart as
#: "resent (idempotent by id)": the worker and idle drop a repeated event id; a person may see a message twice.
AT_LEAST_ONCE = {"PostWebhook", "SendEmail", "Invoke"}
#: Writes whose repetition by a retried invocation leaves the same end state (the report's archive: same key, same
#: content; a Security Hub import: same record ``Id``, same ``UpdatedAt``): a repeat is counted with botocore's
#: idempotent resends, not as acting twice. What an import left behind is judged by ``testing.hub_state``.
REWRITES = {"PutObject", "BatchImportFindings"}
#: Calls without a client token whose repetition is a second effect (docs/reliability.md has the full table).
NON_IDEMPOTENT = {"SendCommand", "RotateKeyOnDemand"}
TARGET_KEYS = (
    "InstanceIds",
    "FunctionName",
    "Key",
    "Resources",
    "InstanceId",
    "GroupId",
    "KeyId",
    "SecretId",
    "AccessKeyId",
    "UserName",
    "AssociationId",
    "NetworkInterfaceId",
    "Bucket",
    "AutoScalingGroupName",
    "TargetGroupArn",
)
Action = tuple[str, str]


def target_of(params: dict[str, Any]) -> str:
    for key in TARGET_KEYS:
        value = params.get(key)
        if isinstance(value, list) and value:
            return str(value[0])
        if isinstance(value, str):
            return value
    return "-"


def is_action(call: ApiCall) -> bool:
    return (
        call.mutating
        and call.executed > 0
        and call.service not in PLUMBING_SERVICES
        and call.operation not in PLUMBING_OPERATIONS
    )


@dataclass
class CaseRun:
    """What happened to one case: its deliveries, its actions (resource normalised), its ledger decisions."""

    case: Case
    deliveries: list[Delivery] = field(default_factory=list)
    actions: Counter[Action] = field(default_factory=Counter)
    resent: int = 0
    resent_non_idempotent: int = 0
    resent_by_id: int = 0
    ledger: list[tuple[str, str, str]] = field(default_factory=list)
    parked: bool = False
    published: Counter[str] = field(default_factory=Counter)
    unsent: set[str] = field(default_factory=set)
    replayed: bool = False  # parked during the run and re-delivered by the runbook's replay

    @property
    def settled(self) -> bool:
        """Handled or rejected; a case of several events when each of them was."""
        if not self.case.then:
            return any(d.status in ("handled", "rejected") for d in self.deliveries)
        done = {d.event_id for d in self.deliveries if d.status in ("handled", "rejected")}
        return set(self.case.event_ids) <= done

    @property
    def rejected(self) -> bool:
        return any(d.status == "rejected" for d in self.deliveries)


def _normalise(case: Case, value: str) -> str:
    return "<resource>" if case.resource != "-" and case.resource in value else value


def _finding_key(entry: dict[str, Any]) -> str:
    try:
        detail = json.loads(entry.get("Detail") or "{}")
    except ValueError:
        return "?"
    return str(detail.get("id") or f"{detail.get('rule')}|{detail.get('resource')}")


def run_cases(
    deployment: Deployment,
    cases: Sequence[Case],
    injector: FaultInjector,
    *,
    duplicate_share: float = 0.0,
    seed: int = 11,
    after: Callable[[list[CaseRun]], None] | None = None,
) -> list[CaseRun]:
    """Deliver every case once, plus a share of them again later in the stream (EventBridge's at-least-once); then
    ``after`` (the runbook: :func:`governor_cli.testing.runbook.follow`) and the observation of what each case did."""
    runs = deliver_cases(deployment, cases, injector, duplicate_share=duplicate_share, seed=seed)
    if after is not None:
        after(runs)
    return observe(deployment, runs, injector)


def case_index(label: str | None) -> int | None:
    """The case a call belongs to (labels ``<case>/<position>#<attempt>``); None for the runbook's own calls."""
    head = (label or "").split("/", 1)[0]
    return int(head) if head.isdigit() else None


def deliver_cases(
    deployment: Deployment,
    cases: Sequence[Case],
    injector: FaultInjector,
    *,
    duplicate_share: float = 0.0,
    seed: int = 11,
) -> list[CaseRun]:
    order = list(range(len(cases)))
    shuffler = random.Random(seed)
    for index in range(len(cases)):
        if shuffler.random() < duplicate_share and not cases[index].sync:
            order.insert(shuffler.randrange(index + 1, len(order) + 1), index)
    runs = [CaseRun(case) for case in cases]
    for position, index in enumerate(order):
        case = cases[index]
        send = deployment.request if case.sync else deployment.deliver
        runs[index].deliveries.append(send(case.function, case.event, injector=injector, label=f"{index}/{position}"))
        if len(runs[index].deliveries) == 1:  # the later events follow the first delivery (a retry, a replay)
            for number, later in enumerate(case.then, 1):
                label = f"{index}/{position}.{number}"
                runs[index].deliveries.append(send(case.function, later, injector=injector, label=label))
    return runs


def observe(deployment: Deployment, runs: list[CaseRun], injector: FaultInjector) -> list[CaseRun]:
    """What each case did, from the recorded calls, the DLQs, the ledger and the outbox as they are now."""
    by_case: dict[int, list[ApiCall]] = {}
    unattributed: list[ApiCall] = []
    for call in injector.calls:
        if call.label:
            index = case_index(call.label)
            if index is None:
                unattributed.append(call)
            else:
                by_case.setdefault(index, []).append(call)
    parked_ids = {
        message.get("event_id")
        for function in {r.case.function for r in runs}
        for message in deployment.dlq_messages(function)
    }
    decisions: dict[str, list[dict[str, Any]]] = {}
    for item in deployment.ledger_decisions():
        decisions.setdefault(str(item.get("event_id")), []).append(item)
    unsent: dict[str, set[str]] = {}
    staged_by: dict[str, str] = {}  # finding id -> the event that staged it
    for item in deployment.ledger_items("outbox"):
        staged_by[str(item.get("finding_id"))] = str(item.get("event_id"))
        if not item.get("sent_at") and not item.get("withdrawn_at"):
            unsent.setdefault(str(item.get("event_id")), set()).add(str(item.get("finding_id")))
    by_event = {event_id: run for run in runs for event_id in run.case.event_ids}
    for call in unattributed:  # a sweep's stale flush publishes what a case's invocation left unsent
        if call.operation == "PutEvents" and call.executed > 0 and call.ok:
            for entry in call.params.get("Entries") or []:
                published = _finding_key(entry)
                owner = by_event.get(staged_by.get(published, ""))
                if owner is not None:
                    owner.published[published] += call.executed
    for index, run in enumerate(runs):
        executions: Counter[Action] = Counter()
        deliveries: Counter[Action] = Counter()
        answer_lost: set[Action] = set()
        for call in by_case.get(index, []):
            if call.operation == "PutEvents" and call.executed > 0:
                for entry in call.params.get("Entries") or []:
                    run.published[_finding_key(entry)] += call.executed
            if is_action(call):
                key = (call.operation, _normalise(run.case, target_of(call.params)))
                if call.operation in AT_LEAST_ONCE:
                    deliveries[key] += call.executed
                    if not call.ok or call.executed > 1:  # botocore or slack_sdk resent after a lost answer
                        answer_lost.add(key)
                    run.actions[key] = 1
                    continue
                if call.operation in REWRITES and key in run.actions:
                    run.resent += call.executed
                    continue
                run.actions[key] += 1
                run.resent += max(0, call.executed - 1)
                if call.operation in NON_IDEMPOTENT:
                    executions[key] += call.executed
        run.resent_non_idempotent = sum(max(0, n - 1) for n in executions.values())
        retried = any(d.attempts > 1 or d.status == "dlq" for d in run.deliveries)
        for key, count in deliveries.items():
            if count > 1 and (key in answer_lost or retried):
                run.resent_by_id += count - 1  # the answer or the record of it was lost: sent again on purpose
            elif count > 1:
                run.actions[key] = count  # sent twice with nothing lost: a double delivery, "acted twice"
        run.unsent = unsent.get(run.case.event_id, set())
        run.ledger = sorted(
            (str(d.get("policy")), str(d.get("verdict")), _normalise(run.case, str(d.get("resource"))))
            for d in decisions.get(run.case.event_id, [])
        )
        run.parked = any(event_id in parked_ids for event_id in run.case.event_ids)
    return runs


@dataclass
class Verdict:
    """One row of RELIABILITY.md: how many events, what was injected, what happened, what was lost."""

    mode: str
    rate: float
    events: int
    deliveries: int
    attempts: int
    faults: Counter[str]
    handled: int = 0
    rejected: int = 0
    dlq: int = 0
    partial_before_dlq: int = 0
    double_actions: int = 0
    outside_policy: int = 0
    missed_actions: int = 0
    ledger_mismatches: int = 0
    lost: int = 0
    resent: int = 0
    resent_non_idempotent: int = 0
    resent_by_id: int = 0
    findings_expected: int = 0
    findings_published: int = 0
    findings_unsent: int = 0
    findings_lost: int = 0
    findings_twice: int = 0
    slowest_seconds: float = 0.0
    over_timeout: int = 0
    #: Stop now in the idle episode: Slack's signed clicks, those the endpoint accepted (200), the instances a click
    #: stopped, the accepted clicks answered with a recorded refusal, and those never answered.
    stop_now_clicks: int = 0
    stop_now_accepted: int = 0
    stop_now_stopped: int = 0
    stop_now_refused: int = 0
    stop_now_lost: int = 0
    #: The Security Hub export (``testing.hub_state``): records judged after the runbook, those missing, those ACTIVE
    #: again after their fix, and those otherwise unlike the clean run's.
    hub_records: int = 0
    hub_lost: int = 0
    hub_resurrected: int = 0
    hub_differs: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.double_actions
            or self.outside_policy
            or self.missed_actions
            or self.ledger_mismatches
            or self.lost
            or self.over_timeout
            or self.findings_lost
            or self.resent_non_idempotent
            or self.stop_now_lost
            or self.hub_lost
            or self.hub_resurrected
            or self.hub_differs
        )


def references(runs: Iterable[CaseRun]) -> dict[str, CaseRun]:
    """Clean runs by case kind (cases are independent, so one clean case of a kind stands for all of that kind);
    a malformed event's clean outcome is a rejection with no action and no decision."""
    found = {run.case.kind: run for run in runs}
    found["invalid"] = CaseRun(Case("invalid", "-", {"id": "-"}, "-", kind="invalid"))
    return found


def check(
    mode: str,
    rate: float,
    reference: dict[str, CaseRun],
    faulty: Sequence[CaseRun],
    injector: FaultInjector,
    timeouts: dict[str, float] | None = None,
    *,
    runbook: bool = False,
) -> Verdict:
    """Compare each case of a faulty run with the clean run of its kind and count every broken invariant.

    With ``runbook`` (the run ended with :func:`governor_cli.testing.runbook.follow`: every DLQ replayed once with
    the faults off, then a sweep's stale flush), an event still parked (a malformed one apart: its rejection is the
    clean outcome) and a finding still staged unsent are lost: nothing else would ever deliver them. ``dlq`` then
    counts the events parked during the run and replayed."""
    verdict = Verdict(
        mode=mode,
        rate=rate,
        events=len(faulty),
        deliveries=sum(len(r.deliveries) for r in faulty),
        attempts=sum(d.attempts for r in faulty for d in r.deliveries),
        faults=Counter(injector.injected),
    )
    for run in faulty:
        clean = reference[run.case.kind]
        name = run.case.name
        verdict.resent += run.resent
        verdict.resent_non_idempotent += run.resent_non_idempotent
        verdict.resent_by_id += run.resent_by_id
        if run.resent_by_id:
            verdict.notes.append(f"{name}: delivered again after a lost answer ({run.resent_by_id}x, same id)")
        if run.resent_non_idempotent:
            verdict.problems.append(f"{name}: a non-idempotent call was executed more than once")
        expected = 0 if run.rejected else len(clean.published)
        published = len(run.published)
        verdict.findings_expected += expected
        verdict.findings_published += min(published, expected) if expected else published
        verdict.findings_twice += sum(1 for n in run.published.values() if n > 1)
        unpublished = max(0, expected - published)
        if run.parked and not run.settled and not runbook:
            # The event waits in its DLQ: its findings are in the outbox or will be made again by the replay.
            verdict.findings_unsent += unpublished
            unpublished = 0
        held = 0 if runbook else min(unpublished, len(run.unsent))
        verdict.findings_unsent += held
        if held:
            verdict.problems.append(f"{name}: handled, {held} finding(s) left unsent in the outbox")
        if unpublished - held:
            verdict.findings_lost += unpublished - held
            where = (
                "still unsent after the runbook's replay and sweep"
                if runbook
                else "neither published nor held in the outbox"
            )
            verdict.problems.append(f"{name}: {unpublished - held} finding(s) {where}")
        limit = (timeouts or {}).get(run.case.function)
        for delivery in run.deliveries:
            slowest = max(delivery.seconds, default=0.0)
            verdict.slowest_seconds = max(verdict.slowest_seconds, slowest)
            if limit is not None and slowest > limit:
                verdict.over_timeout += 1
                verdict.problems.append(f"{name}: an attempt needed {slowest:.0f}s, over the {limit:.0f}s timeout")
        if run.case.forbidden and run.actions:
            verdict.outside_policy += 1
            verdict.problems.append(f"{name}: acted on a resource the policy protects: {dict(run.actions)}")
        extra = set(run.actions) - set(clean.actions)
        if extra:
            verdict.outside_policy += 1
            verdict.problems.append(f"{name}: actions the clean run did not take: {sorted(extra)}")
        doubled = [a for a, n in run.actions.items() if n > 1]
        if doubled:
            verdict.double_actions += 1
            verdict.problems.append(f"{name}: acted more than once: {doubled}")
        if runbook and run.parked and run.case.kind != "invalid":
            verdict.lost += 1
            verdict.problems.append(f"{name}: still parked in its DLQ after the runbook's replay")
        elif run.settled:
            if run.rejected:
                verdict.rejected += 1
            else:
                verdict.handled += 1
            if run.replayed and run.case.kind != "invalid":
                verdict.dlq += 1
            missing = set(clean.actions) - set(run.actions)
            if missing and not run.rejected:
                verdict.missed_actions += 1
                verdict.problems.append(f"{name}: handled but did not do {sorted(missing)}")
            if run.ledger != clean.ledger and not run.rejected:
                verdict.ledger_mismatches += 1
                verdict.problems.append(f"{name}: ledger {run.ledger} differs from the clean run's {clean.ledger}")
        elif run.parked and not runbook:
            verdict.dlq += 1
            if run.actions:
                verdict.partial_before_dlq += 1
        else:
            verdict.lost += 1
            verdict.problems.append(f"{name}: neither handled nor in the DLQ")
    return verdict


def summarise(verdicts: Iterable[Verdict]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for v in verdicts:
        totals.update(
            events=v.events,
            lost=v.lost,
            double_actions=v.double_actions,
            outside_policy=v.outside_policy,
            ledger_mismatches=v.ledger_mismatches,
        )
    return dict(totals)


def follow_runbook(deployment: Deployment, runs: list[CaseRun], injector: FaultInjector) -> None:
    """After a faulty run: the runbook (:func:`governor_cli.testing.runbook.follow`), each replayed event's delivery
    added to its case (labelled ``<case>/replay`` so its calls count as the case's)."""
    from governor_cli.testing.runbook import follow

    by_event = {event_id: (index, run) for index, run in enumerate(runs) for event_id in run.case.event_ids}

    def label_of(event: Any) -> str:
        found = by_event.get(str(event.get("id")) if isinstance(event, dict) else "")
        return f"{found[0]}/replay" if found else "runbook-replay"

    def delivered(event: Any, delivery: Delivery) -> None:
        found = by_event.get(str(event.get("id")) if isinstance(event, dict) else "")
        if found:
            found[1].deliveries.append(delivery)
            found[1].replayed = True

    follow(deployment, {run.case.function for run in runs}, injector, label_of=label_of, delivered=delivered)
