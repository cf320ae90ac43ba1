"""The findings outbox: a finding is recorded (unsent) before anything is acted on, and marked sent only once the
bus accepted it.

Every handler that records a decision and acts on it goes through one :class:`Outbox` per invocation:
``add`` stages findings in the ledger under deterministic ids (event id + resource + rule), ``flush`` publishes what
is unsent and marks what EventBridge accepted, ``resume`` publishes what an earlier attempt of the same event staged
but never got accepted (a Lambda retry re-runs the handler, since Powertools idempotency forgets a failed attempt,
and may find the resource already fixed and produce no finding of its own), and ``flush_stale`` lets a scheduled
sweep publish what any earlier invocation of its policy left behind.

Ledger layout: one ``outbox`` item per finding (``finding`` as JSON, ``sent_at`` once accepted) and one
``outbox-event`` item per event listing its finding ids, both read strongly consistent. The findings of one call
are read, staged and marked sent together (``Ledger.get_many`` / ``put_many``: BatchGetItem and BatchWriteItem on
DynamoDB), so a sweep with a thousand warnings makes a few dozen outbox requests, not three thousand.

A finding about an act can be staged *before* the act (``pending`` names the act): an invocation killed between the
act's answer and anything it writes after still leaves the finding behind. A pending finding is published only
through a ``resolve`` callback that re-reads the resource and says what happened (the finding to send, or None: the
act did not happen, the finding is withdrawn); an outbox without one leaves pending findings to the function that
has one. ``withdraw`` takes a staged finding back when the act is held back or fails.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence

from governor.domain.decision import Finding
from governor.domain.ids import deterministic_id
from governor.domain.ports import FindingSink, Ledger, PublishError, utcnow
from governor.observability import logger, metrics

OUTBOX_KIND = "outbox"
EVENT_KIND = "outbox-event"
#: A staged finding younger than this may belong to an invocation still running; sweeps leave it to that one.
STALE_AFTER = dt.timedelta(minutes=5)
#: How far back a sweep looks for unsent findings.
HORIZON = dt.timedelta(days=7)
SENT_TTL = dt.timedelta(days=7)
PENDING_TTL = dt.timedelta(days=30)


def finding_id(event_id: str, resource: str, rule: str, part: str = "") -> str:
    return deterministic_id(event_id, resource, rule, part)


def _parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return dt.datetime.fromisoformat(value)


class Outbox:
    """One invocation's findings: staged with the decision, published until accepted, never marked sent early."""

    def __init__(
        self,
        ledger: Ledger,
        sink: FindingSink,
        *,
        event_id: str,
        clock: Callable[[], dt.datetime] = utcnow,
        resolve: Callable[[Finding, str], Finding | None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.resolve = resolve
        self.sink = sink
        self.event_id = event_id
        self.clock = clock
        self._staged: dict[str, Finding] = {}
        self._used: set[str] = set()
        self.sent_at: dict[str, dt.datetime] = {}

    # -- staging ---------------------------------------------------------------------------------------------------

    def identify(self, finding: Finding, part: str = "") -> Finding:
        """The finding with its deterministic id (kept if it has one); a second finding of the same resource and rule
        in the same invocation gets a numbered id, in the order the handler produced them."""
        if finding.id:
            return finding
        base = finding_id(finding.event_id or self.event_id, finding.resource, finding.rule, part)
        chosen, number = base, 1
        while chosen in self._used:
            number += 1
            chosen = finding_id(finding.event_id or self.event_id, finding.resource, finding.rule, f"{part}#{number}")
        self._used.add(chosen)
        return finding.model_copy(update={"id": chosen})

    def add(self, findings: Iterable[Finding], *, part: str = "", pending: str | None = None) -> list[Finding]:
        """Record each finding unsent (unless already accepted earlier); returns them with their ids. ``pending``
        names an act about to be made: the finding goes out only once ``resolve`` confirms it (see the module).

        A sweep's findings are staged together: one batched read of what is already there, one batched write."""
        staged = [self.identify(raw, part) for raw in findings]
        if staged:
            self._stage_all(staged, self.clock(), pending=pending)
            self._index([f.id for f in staged if f.id])
        return staged

    def stage(self, finding: Finding, now: dt.datetime | None = None, *, pending: str | None = None) -> None:
        """Record (or update the text of) one unsent finding; one already accepted stays as it was."""
        self._stage_all([finding], now or self.clock(), pending=pending)

    def _stage_all(self, findings: Sequence[Finding], now: dt.datetime, *, pending: str | None) -> None:
        ids = [f.id for f in findings if f.id]
        assert len(ids) == len(findings)
        existing = self.ledger.get_many(OUTBOX_KIND, ids)
        writes = []
        for finding in findings:
            assert finding.id is not None
            found = existing.get(finding.id)
            if found is not None and found.get("sent_at"):
                self.sent_at[finding.id] = _parse_time(found["sent_at"]) or now
                continue
            item = {
                "at": (found or {}).get("at") or now.isoformat(),
                "event_id": self.event_id,
                "finding_id": finding.id,
                "policy": finding.policy,
                "finding": finding.model_dump_json(),
                "expires_at": int((now + PENDING_TTL).timestamp()),
                **({"pending": pending} if pending else {}),
            }
            writes.append((OUTBOX_KIND, finding.id, item))
        # Written before this invocation may publish them: a finding counts as staged only once the ledger holds it.
        self.ledger.put_many(writes)
        by_id = {f.id: f for f in findings}
        for _, finding_id_, _ in writes:
            if pending:
                self._staged.pop(finding_id_, None)  # not this invocation's to publish until the act is done
            else:
                self._staged[finding_id_] = by_id[finding_id_]

    def withdraw(self, finding_id_: str) -> None:
        """Take back a finding staged before an act that was then held back or failed: no sweep publishes it."""
        item = self.ledger.get_item(OUTBOX_KIND, finding_id_)
        self._staged.pop(finding_id_, None)
        if item is None or item.get("sent_at") or item.get("withdrawn_at"):
            return
        now = self.clock()
        self.ledger.put_item(
            OUTBOX_KIND,
            finding_id_,
            {
                **{k: v for k, v in item.items() if k not in ("pending", "pk", "sk", "kind", "key")},
                "withdrawn_at": now.isoformat(),
                "expires_at": int((now + SENT_TTL).timestamp()),
            },
        )

    def _index(self, ids: Sequence[str]) -> None:
        found = self.ledger.get_item(EVENT_KIND, self.event_id) or {}
        known = [str(i) for i in found.get("ids") or []]
        merged = known + [i for i in ids if i not in known]
        if merged != known:
            now = self.clock()
            self.ledger.put_item(
                EVENT_KIND,
                self.event_id,
                {"event_id": self.event_id, "ids": merged, "expires_at": int((now + PENDING_TTL).timestamp())},
            )

    # -- publishing ------------------------------------------------------------------------------------------------

    def flush(self, *, raise_on_failure: bool = True) -> dict[str, dt.datetime]:
        """Publish every staged, unsent finding; mark the accepted ones sent. Returns id -> acceptance time for every
        finding of this invocation known to be accepted (now or earlier). Raises :class:`PublishError` when some were
        not accepted, unless ``raise_on_failure`` is off (a sweep: the next sweep publishes them)."""
        pending = [f for i, f in self._staged.items() if i not in self.sent_at]
        self._publish(pending, raise_on_failure=raise_on_failure)
        return dict(self.sent_at)

    def _publish(self, findings: list[Finding], *, raise_on_failure: bool) -> None:
        if not findings:
            return
        now = self.clock()
        try:
            self.sink.publish(findings)
        except PublishError as error:
            accepted = set(error.accepted)
            self._mark_sent([f for f in findings if f.id in accepted], now)
            lost = len(findings) - len(accepted & {f.id for f in findings})
            metrics.add_metric(name="FindingsUnsent", unit="Count", value=lost)
            logger.warning("findings not accepted; left in the outbox", extra={"unsent": lost, "error": str(error)})
            if raise_on_failure:
                raise
            return
        self._mark_sent(findings, now)

    def _mark_sent(self, findings: Sequence[Finding], now: dt.datetime) -> None:
        """Mark accepted findings sent, in one batched write; only once it is written are they known sent here."""
        writes = []
        for finding in findings:
            assert finding.id is not None
            item = {
                "at": now.isoformat(),
                "event_id": finding.event_id or self.event_id,
                "finding_id": finding.id,
                "policy": finding.policy,
                "finding": finding.model_dump_json(),
                "sent_at": now.isoformat(),
                "expires_at": int((now + SENT_TTL).timestamp()),
            }
            writes.append((OUTBOX_KIND, finding.id, item))
        self.ledger.put_many(writes)
        for finding in findings:
            assert finding.id is not None
            self.sent_at[finding.id] = now
            self._staged.pop(finding.id, None)

    def _load(self, finding_ids: Iterable[str]) -> list[Finding]:
        unsent = []
        wanted = [i for i in dict.fromkeys(finding_ids) if i not in self._staged and i not in self.sent_at]
        items = self.ledger.get_many(OUTBOX_KIND, wanted) if wanted else {}
        for finding_id_ in wanted:
            item = items.get(finding_id_)
            if item is None:
                continue
            if item.get("sent_at"):
                self.sent_at[finding_id_] = _parse_time(item["sent_at"]) or self.clock()
                continue
            if item.get("withdrawn_at"):
                continue
            finding = Finding.model_validate(json.loads(str(item["finding"])))
            if item.get("pending"):
                if self.resolve is None:
                    continue  # left to a function that can tell whether the act happened
                resolved = self.resolve(finding, str(item["pending"]))
                if resolved is None:
                    self.withdraw(finding_id_)
                    continue
                finding = resolved.model_copy(update={"id": finding_id_})
                # Recorded as resolved before it is published: what the bus delivers is what the outbox holds (the
                # Security Hub export checks a finding against it, ``governor.securityhub.provenance``).
                self.stage(finding)
            unsent.append(finding)
        return unsent

    def resume(self) -> None:
        """Take over what an earlier attempt of this event staged and never got accepted; ``flush`` publishes it."""
        index = self.ledger.get_item(EVENT_KIND, self.event_id) or {}
        for finding in self._load(str(i) for i in index.get("ids") or []):
            assert finding.id is not None
            self._staged[finding.id] = finding

    def flush_stale(self, policy: str | None = None) -> int:
        """A sweep's clean-up: publish this policy's findings (every policy's with None) that earlier invocations left
        unsent (older than :data:`STALE_AFTER`, so a running invocation's own are left to it). Never raises; returns
        how many went out. An organisation target reads only the entries it staged (``fanout.TargetLedger.query_own``:
        its partition of the ``by-target`` index), not the organisation's; what was staged outside any target is the
        round planner's to flush (``fanout.plan``)."""
        now = self.clock()
        own = getattr(self.ledger, "query_own", None)
        read = own if own is not None else self.ledger.query_kind
        stale = [
            str(item.get("finding_id") or "")
            for item in read(OUTBOX_KIND, since=now - HORIZON)
            if not item.get("sent_at")
            and not item.get("withdrawn_at")
            and (policy is None or item.get("policy") == policy)
            and (_parse_time(item.get("at")) or now) <= now - STALE_AFTER
        ]
        found = self._load(i for i in stale if i)
        before = len(self.sent_at)
        self._publish(found, raise_on_failure=False)
        return len(self.sent_at) - before


def published_at(ledger: Ledger, finding_id_: str) -> dt.datetime | None:
    """When the bus accepted this finding, or None if it has not (yet)."""
    item = ledger.get_item(OUTBOX_KIND, finding_id_)
    return _parse_time(item.get("sent_at")) if item else None
