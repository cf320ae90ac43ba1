"""The ``keys`` enforcer: a daily sweep of KMS keys, IAM access keys and secrets, and an immediate check of the one
resource a KMS / IAM / Secrets Manager CloudTrail call touched.

Every decision is recorded before anything is changed; each resource is (re-)read right before it is acted on, and
only ``enforced`` actions are taken. Findings go to the governor bus in one batch per invocation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar

from pydantic import ConfigDict

from governor import runner
from governor.adapters.aws import per_session
from governor.domain.actions import Outcome
from governor.domain.decision import Action, Decision, Finding
from governor.domain.model import Model
from governor.domain.ports import Clock, ReadRefused, utcnow
from governor.domain.tagging import ResourceKind, TagSetting, record_settings
from governor.events.envelopes import (
    CLOUDTRAIL_DETAIL_TYPE,
    CloudTrailEvent,
    CloudTrailRecord,
    GovernorEvent,
    InvalidEventError,
    parse_model,
)
from governor.keys.domain import (
    decide_access_key,
    decide_failed_call,
    decide_kms_key,
    decide_root_key_event,
    decide_secret,
    decide_unreadable,
    failure_finding,
    finding_for,
)
from governor.keys.events import CREATED_WITH_TAGS, ROOT_USER, RULE_EVENTS, Target, event_target
from governor.keys.resources import (
    AccessKeysPort,
    Kind,
    KmsPort,
    SecretsPort,
    parse_credential_report,
    with_tags,
)
from governor.keys.tags import bounded, decide_tag_setting, is_tag_call, tag_settings
from governor.observability import logger, metrics
from governor.outbox import Outbox
from governor.runtime import Handler, Invocation, Runtime, default_runtime

SCHEDULED_DETAIL_TYPE = "Scheduled Event"
ALL_KINDS: tuple[Kind, ...] = ("kms", "access_keys", "secrets")
MAX_ACTIONS_PER_RUN = 25  # bounds the blast radius of one invocation (a policy typo must not disable every key)
OVER_BUDGET = "ActionBudget"  # the outcome of an action past the budget: recorded, not taken

T = TypeVar("T")


class SweepDetail(Model):
    """The schedule's payload: optionally a subset of kinds to sweep (default: all three)."""

    model_config = ConfigDict(extra="forbid")

    kinds: list[Literal["kms", "access_keys", "secrets"]] = list(ALL_KINDS)


@dataclass(frozen=True)
class Sweep:
    event_id: str
    kinds: tuple[Kind, ...]
    account: str | None = None
    region: str | None = None


@dataclass(frozen=True)
class Check:
    event_id: str
    record: CloudTrailRecord
    target: Target | None
    account: str | None = None
    region: str | None = None
    source: str = ""


@dataclass(frozen=True)
class TagCall:
    """A tagging call on a user, role, KMS key or secret: recorded with its author, an exemption reported at once."""

    event_id: str
    record: CloudTrailRecord
    source: str
    account: str | None = None
    region: str | None = None


Trigger = Sweep | Check | TagCall


class SystemClock:
    def now(self) -> dt.datetime:
        return utcnow()


@dataclass
class Adapters:
    """What the keys enforcer reads and changes; tests pass in-memory fakes."""

    kms: KmsPort
    iam: AccessKeysPort
    secrets: SecretsPort
    clock: Clock = field(default_factory=SystemClock)


def parse_trigger(raw: Any) -> Trigger:
    """A scheduled sweep or one of the trigger CloudTrail calls; anything else is rejected with the reason."""
    envelope = parse_model(GovernorEvent, raw)
    if envelope.detail_type == CLOUDTRAIL_DETAIL_TYPE:
        event = parse_model(CloudTrailEvent, raw)
        record = event.detail
        names = RULE_EVENTS.get(event.source, ())
        if record.event_name not in names:
            raise InvalidEventError(
                f"{event.source} {record.event_name} is not a call the keys enforcer handles", envelope.id
            )
        if is_tag_call(event.source, record):
            return TagCall(envelope.id, record, event.source, envelope.account, envelope.region)
        target = event_target(record)
        if target is None and not record.failed:
            raise InvalidEventError(
                f"{record.event_name} record names no key, user or secret (requestParameters missing)", envelope.id
            )
        return Check(envelope.id, record, target, envelope.account, envelope.region, event.source)
    if envelope.detail_type == SCHEDULED_DETAIL_TYPE and envelope.source in ("aws.scheduler", "aws.events"):
        detail = parse_model(SweepDetail, envelope.detail)
        return Sweep(envelope.id, tuple(detail.kinds), envelope.account, envelope.region)
    raise InvalidEventError(
        f"unsupported event for the keys enforcer: source {envelope.source}, detail-type {envelope.detail_type}",
        envelope.id,
    )


class KeysRun:
    """One invocation: decisions recorded in order, findings collected and published once, actions bounded."""

    def __init__(self, runtime: Runtime, adapters: Adapters, event_id: str, account: str | None) -> None:
        self.runtime = runtime
        self.policy = runtime.policy
        self.adapters = adapters
        self.event_id = event_id
        self.account = account
        self.now = adapters.clock.now()
        self.findings: list[Finding] = []
        self.outbox = Outbox(runtime.ledger, runtime.sink, event_id=event_id, clock=adapters.clock.now)
        self.outbox.resume()  # a retry publishes what an earlier attempt of this event staged and never got accepted
        self.run = runner.Run(event_id, runtime.ledger, self.policy, adapters, self.outbox, at=self.now)
        self.decisions = 0
        self.acted = 0
        self.failed = 0
        self.unreadable = 0
        self._budget_finding = False

    def guarded(self, kind: Kind, read: Callable[[], None]) -> None:
        """Run one read-decide-act step; a resource AWS will not let us read becomes a finding, not a failed run.

        Without this, the first key whose policy does not delegate to IAM stopped the KMS sweep, so the access-key
        and secret sweeps never ran and the invocation ended in the DLQ.
        """
        try:
            read()
        except ReadRefused as refused:
            self.unreadable += 1
            logger.warning("read refused", extra={"kind": kind, "resource": refused.resource, "error": refused.code})
            self.settle(decide_unreadable(kind, refused.resource, refused.code, refused.message))

    def settle(self, decision: Decision, live: Any = None) -> Decision:
        """The runner's act path: record, stage the finding (unsent), take the enforced actions within this run's
        budget (``live`` is the resource as read just before deciding); ``finish`` publishes."""
        self.decisions += 1
        settled = self.run.settle(
            decision, findings=self._findings, before=partial(self._within_budget, decision), live=live
        )
        for action, outcome in settled.results:
            if not outcome.ok and outcome.error_code != OVER_BUDGET:
                self.failed += 1
                logger.warning(
                    "action refused",
                    extra={"resource": decision.resource, "action": action.type, "error": outcome.error_code},
                )
        self.findings.extend(settled.findings)
        return decision

    def _findings(self, decision: Decision, results: Sequence[tuple[Action, Outcome]] | None) -> list[Finding]:
        """The decision's finding, then one for each action AWS refused."""
        if decision.verdict != "act":
            return []
        region = self.runtime.region
        found = [finding_for(decision, event_id=self.event_id, account=self.account, region=region)]
        for action, outcome in results or ():
            if not outcome.ok and outcome.error_code != OVER_BUDGET:
                found.append(failure_finding(decision, action, outcome, event_id=self.event_id, region=region))
        return found

    def _within_budget(self, decision: Decision, action: Action) -> Outcome | None:
        """None while this run may still act; past the budget the action is recorded as not taken, and one critical
        finding says so."""
        if self.acted < MAX_ACTIONS_PER_RUN:
            self.acted += 1
            metrics.add_metric(name="KeyActions", unit="Count", value=1)
            return None
        self._over_budget(decision)
        return Outcome(ok=False, error_code=OVER_BUDGET, message=f"more than {MAX_ACTIONS_PER_RUN} changes this run")

    def _stage(self, finding: Finding) -> None:
        self.findings.extend(self.outbox.add([finding]))

    def _over_budget(self, decision: Decision) -> None:
        if self._budget_finding:
            return
        self._budget_finding = True
        self._stage(
            Finding(
                policy="keys",
                rule="keys.action_budget",
                severity="critical",
                resource=decision.resource,
                title=f"More than {MAX_ACTIONS_PER_RUN} key changes in one run: the rest were not made",
                detail="Check the keys policy; the remaining violations are recorded and reported, not acted on.",
                event_id=self.event_id,
                account=self.account,
                region=self.runtime.region,
            )
        )

    def _reread(self, read: Callable[[str], T | None], resource: str, what: str) -> T | None:
        """The resource as it is now, right before deciding; one that no longer exists is recorded as ignored."""
        found = read(resource)
        if found is None:
            self.settle(
                Decision(policy="keys", verdict="ignored", resource=resource, reasons=[f"{what} no longer exists"])
            )
        return found

    # KMS ----------------------------------------------------------------------------------------------------

    def check_kms(self, key_id: str) -> None:
        kms = self.adapters.kms
        key = self._reread(kms.key, key_id, "the key")
        if key is None:
            return
        decision = decide_kms_key(key, self.policy, self.now)
        if decision.verdict == "act":
            key = self.bounded(with_tags(key, kms.tags(key.key_id)), (key.key_id, key.arn), "kms-key")
            decision = decide_kms_key(key, self.policy, self.now)
        self.settle(decision, key)

    def sweep_kms(self) -> None:
        key_ids: list[str] = []

        def listing() -> None:
            key_ids.extend(self.adapters.kms.key_ids())

        self.guarded("kms", listing)
        for key_id in key_ids:
            self.guarded("kms", partial(self.check_kms, key_id))

    # IAM access keys ------------------------------------------------------------------------------------------

    def check_user(self, user: str) -> None:
        iam = self.adapters.iam
        for key in iam.user_keys(user):
            key = self.bounded(key, (key.user, key.user_arn), "iam-user")
            self.settle(decide_access_key(key, self.policy, self.now), key)

    def sweep_access_keys(self) -> None:
        """One credential report for every user; only users with a finding are re-read key by key."""
        self.guarded("access_keys", self._sweep_access_keys)

    def _sweep_access_keys(self) -> None:
        rows = parse_credential_report(self.adapters.iam.credential_report())
        decided = [(row, decide_access_key(row, self.policy, self.now)) for row in rows]
        flagged = {row.user for row, d in decided if d.verdict == "act" and row.user != ROOT_USER}
        for row, decision in decided:
            if row.user not in flagged:
                self.settle(decision)
        for user in sorted(flagged):
            self.guarded("access_keys", partial(self.check_user, user))

    # Secrets Manager ------------------------------------------------------------------------------------------

    def check_secret(self, secret_id: str) -> None:
        secret = self._reread(self.adapters.secrets.secret, secret_id, "the secret")
        if secret is None:
            return
        secret = self.bounded(secret, (secret.arn, secret.name), "secret")
        self.settle(decide_secret(secret, self.policy, self.now), secret)

    def sweep_secrets(self) -> None:
        listed: list[Any] = []
        self.guarded("secrets", lambda: listed.extend(self.adapters.secrets.secrets()))
        for secret in listed:
            secret = self.bounded(secret, (secret.arn, secret.name), "secret")
            decision = decide_secret(secret, self.policy, self.now)
            if decision.enforced_actions():
                self.guarded("secrets", partial(self.check_secret, secret.arn))
            else:
                self.settle(decision)

    # --------------------------------------------------------------------------------------------------------

    def check(self, target: Target, record: CloudTrailRecord | None = None) -> None:
        """The one resource a CloudTrail call touched; a root access key is judged from the call itself."""
        if target.kind == "access_keys" and target.resource_id == ROOT_USER and record is not None:
            self.settle(decide_root_key_event(record))
            return
        # Not guarded: a refused read of the one resource an event names is retried (IAM changes propagate), then
        # parked in the DLQ with its reason; only the sweeps go on past it.
        {"kms": self.check_kms, "access_keys": self.check_user, "secrets": self.check_secret}[target.kind](
            target.resource_id
        )

    def tagged(self, call: TagCall) -> dict[str, Any]:
        """Who tagged which credential, and when: each watched setting recorded (the report lists them by person); an
        exemption on a credential, or a value the governor will not honour, is a finding at once."""
        settings = self.record_tags(call.record, call.source, call.region)
        return self.finish(trigger=call.record.event_name, tags=[s.item() for s in settings])

    def record_tags(self, record: CloudTrailRecord, source: str, region: str | None) -> list[TagSetting]:
        """Record the watched tags a tagging or creating call set, with its author; stage the findings they raise."""
        settings = tag_settings(record, source, self.policy, self.event_id)
        self._publish_settings(settings, region)
        return settings

    def _publish_settings(self, settings: Sequence[TagSetting], region: str | None = None) -> None:
        published = record_settings(
            settings,
            self.runtime.ledger,
            lambda setting: decide_tag_setting(setting, self.policy),
            event_id=self.event_id,
        )
        for decision, title in published:
            finding = Finding.from_decision(
                decision, title, event_id=self.event_id, account=self.account, region=region or self.runtime.region
            )
            self._stage(finding)
        self.decisions += len(settings)

    def bounded(self, resource: T, ids: tuple[str, ...], kind: ResourceKind) -> T:
        """``exempt=true`` on a credential read as its end (``governor.domain.tagging.bounded``). An exemption nobody
        was recorded setting (set before the governor, or by a call it never saw) is recorded as first seen and
        reported at once, like one set in front of it: a credential is never exempted in silence."""
        found, first_seen = bounded(resource, ids, kind, self.runtime.ledger, self.policy, self.now)  # type: ignore[type-var]
        if first_seen is not None:
            self._publish_settings([first_seen])
        return found

    def finish(self, **extra: Any) -> dict[str, Any]:
        self.outbox.flush()
        metrics.add_metric(name="KeyDecisions", unit="Count", value=self.decisions)
        return {
            "status": "ok",
            "event_id": self.event_id,
            "decisions": self.decisions,
            "findings": len(self.findings),
            "actions": self.acted,
            "failed_actions": self.failed,
            "unreadable": self.unreadable,
            **extra,
        }


def _process(trigger: Trigger, runtime: Runtime, adapters: Adapters, call: Invocation) -> dict[str, Any]:
    run = KeysRun(runtime, adapters, trigger.event_id, trigger.account)
    if isinstance(trigger, TagCall):
        return run.tagged(trigger)
    if isinstance(trigger, Sweep):
        run.outbox.flush_stale("keys")  # findings earlier invocations left unsent
        sweeps = {"kms": run.sweep_kms, "access_keys": run.sweep_access_keys, "secrets": run.sweep_secrets}
        for kind in trigger.kinds:
            sweeps[kind]()
        return run.finish(trigger="schedule", kinds=list(trigger.kinds))
    failed = decide_failed_call(trigger.record)
    if failed is not None:
        run.settle(failed)
        return run.finish(trigger=trigger.record.event_name)
    assert trigger.target is not None
    if trigger.record.event_name in CREATED_WITH_TAGS:  # a key or secret created with its tags: who set them, first
        run.record_tags(trigger.record, trigger.source, trigger.region)
    run.check(trigger.target, trigger.record)
    return run.finish(trigger=trigger.record.event_name, resource=trigger.target.resource_id)


def handle(event: Any, runtime: Runtime, adapters: Adapters, context: Any = None) -> dict[str, Any]:
    """Parse at the edge (bad input goes to the DLQ with its reason), then sweep or check one resource, once per
    event id."""
    return HANDLER.handle(event, runtime, adapters, context=context)


@per_session
def _adapters() -> Adapters:
    from governor.keys.iam_keys import IamAccessKeys
    from governor.keys.kms import KmsKeys
    from governor.keys.secrets import SecretsRotation

    region = default_runtime().region
    return Adapters(kms=KmsKeys(region), iam=IamAccessKeys(region), secrets=SecretsRotation(region))


def target_adapters(event: dict[str, Any], runtime: Runtime) -> Adapters:
    """The sweep's adapters in a fan-out target's account and region (through the spoke role in a member account)."""
    from governor.adapters.aws import client, member_target
    from governor.keys.iam_keys import IamAccessKeys
    from governor.keys.kms import KmsKeys
    from governor.keys.secrets import SecretsRotation

    member = member_target(event)
    region = (member[1] if member else None) or runtime.region
    where: dict[str, Any] = {"account": member[0], "event_id": member[2]} if member else {}
    return Adapters(
        kms=KmsKeys(region, **where),
        iam=IamAccessKeys(region, client("iam", region, **where)),
        secrets=SecretsRotation(region, client("secretsmanager", region, **where)),
    )


def adapters_for(event: dict[str, Any], runtime: Runtime) -> Adapters:
    """The container's adapters; a CloudTrail call forwarded from a member account is checked and acted on in that
    account (its spoke role)."""
    from governor.adapters.aws import member_target

    return target_adapters(event, runtime) if member_target(event) else _adapters()


#: Keep KMS keys, access keys and secrets rotated within policy, daily and on every relevant CloudTrail call. In
#: organisation mode the schedule plans one sweep per account and region, access keys (IAM is global) in the first
#: region only (``governor.fanout``).
HANDLER: Handler[Trigger, Adapters] = Handler(
    __name__,
    parse=lambda raw, _: parse_trigger(raw),
    process=_process,
    adapters=adapters_for,
    step="_process",
    sweep="keys",
    targets=target_adapters,
    runtime=lambda: default_runtime(),  # looked up when called (tests replace it)
)
lambda_handler = HANDLER.lambda_handler()
