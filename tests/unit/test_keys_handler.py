"""The keys handler on in-memory fakes: decide, record, then act; bad input to the DLQ; refusals become findings."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from governor.domain.actions import Outcome
from governor.domain.decision import Decision
from governor.domain.ports import PublishError
from governor.keys.handler import MAX_ACTIONS_PER_RUN, Adapters, handle
from governor.keys.resources import AccessKey, KmsKey, Secret
from governor.policy import parse_policy
from governor.runtime import Runtime
from governor_cli.testing import events
from governor_cli.testing.memory import FixedClock, MemoryDeadLetters, MemoryLedger, MemorySink
from tests.conftest import ROOT
from tests.unit.sinks import RefusesFirstBatch
from tests.unit.test_keys_domain import REPORT

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
FIXTURES = ROOT / "tests" / "fixtures" / "keys"
ROTATOR = "arn:aws:lambda:us-east-1:111122223333:function:rotate"


@dataclass
class Journal:
    """One ordered log shared by the ledger and the fakes, to check that decisions are recorded before acting."""

    entries: list[str] = field(default_factory=list)


class JournalLedger(MemoryLedger):
    def __init__(self, journal: Journal) -> None:
        super().__init__()
        self.journal = journal

    def record(self, decision: Decision, *, event_id: str, at: dt.datetime | None = None, held: bool = False) -> str:
        self.journal.entries.append(f"record {decision.resource} {decision.verdict}")
        return super().record(decision, event_id=event_id, at=at, held=held)


@dataclass
class FakeKms:
    journal: Journal
    keys: dict[str, KmsKey] = field(default_factory=dict)
    tags_by_key: dict[str, dict[str, str]] = field(default_factory=dict)
    refuse_on_demand: str | None = None
    reads: int = 0

    def key_ids(self) -> list[str]:
        return list(self.keys)

    def key(self, key_id: str) -> KmsKey | None:
        self.reads += 1
        found = self.keys.get(key_id) or next((k for k in self.keys.values() if k.arn == key_id), None)
        return found

    def tags(self, key_id: str) -> dict[str, str]:
        return self.tags_by_key.get(key_id, {})

    def enable_rotation(self, key_id: str, period_days: int) -> Outcome:
        self.journal.entries.append(f"EnableKeyRotation {key_id} {period_days}")
        self.keys[key_id] = replace(self.keys[key_id], rotation_enabled=True, rotation_period_days=period_days)
        return Outcome(ok=True)

    def rotate_on_demand(self, key_id: str) -> Outcome:
        self.journal.entries.append(f"RotateKeyOnDemand {key_id}")
        if self.refuse_on_demand:
            return Outcome(ok=False, error_code=self.refuse_on_demand, message="You've reached the limit.")
        return Outcome(ok=True)


@dataclass
class FakeIam:
    journal: Journal
    report: str = ""
    keys_by_user: dict[str, list[AccessKey]] = field(default_factory=dict)
    reports_read: int = 0
    users_read: list[str] = field(default_factory=list)

    def credential_report(self) -> str:
        self.reports_read += 1
        return self.report

    def user_keys(self, user: str) -> list[AccessKey]:
        self.users_read.append(user)
        return self.keys_by_user.get(user, [])

    def deactivate(self, user: str, key_id: str) -> Outcome:
        self.journal.entries.append(f"UpdateAccessKey {user} {key_id} Inactive")
        return Outcome(ok=True)


@dataclass
class FakeSecrets:
    journal: Journal
    items: dict[str, Secret] = field(default_factory=dict)

    def secrets(self) -> list[Secret]:
        return list(self.items.values())

    def secret(self, secret_id: str) -> Secret | None:
        return self.items.get(secret_id) or next((s for s in self.items.values() if s.name == secret_id), None)

    def set_rotation(self, secret: Secret, rules: dict[str, Any], token: str | None = None) -> Outcome:
        self.journal.entries.append(f"RotateSecret {secret.arn} {json.dumps(rules, sort_keys=True)}")
        return Outcome(ok=True)


@dataclass
class World:
    runtime: Runtime
    adapters: Adapters
    journal: Journal
    kms: FakeKms
    iam: FakeIam
    secrets: FakeSecrets

    @property
    def ledger(self) -> JournalLedger:
        assert isinstance(self.runtime.ledger, JournalLedger)
        return self.runtime.ledger

    @property
    def sink(self) -> MemorySink:
        assert isinstance(self.runtime.sink, MemorySink)
        return self.runtime.sink

    @property
    def dlq(self) -> MemoryDeadLetters:
        assert isinstance(self.runtime.dead_letters, MemoryDeadLetters)
        return self.runtime.dead_letters

    def run(self, event: Any) -> dict[str, Any]:
        return handle(event, self.runtime, self.adapters)


def world(**keys: Any) -> World:
    journal = Journal()
    kms, iam, secrets = FakeKms(journal), FakeIam(journal), FakeSecrets(journal)
    runtime = Runtime(
        policy=parse_policy({"keys": keys}),
        ledger=JournalLedger(journal),
        sink=MemorySink(),
        dead_letters=MemoryDeadLetters(),
        region="us-east-1",
    )
    adapters = Adapters(kms=kms, iam=iam, secrets=secrets, clock=FixedClock(NOW))
    return World(runtime, adapters, journal, kms, iam, secrets)


def schedule(**detail: Any) -> dict[str, Any]:
    return events.scheduled(
        detail,
        event_id="sched-0001",
        time="2026-12-01T12:00:00Z",
        account="111122223333",
        resources=["arn:aws:scheduler:us-east-1:111122223333:schedule/default/keys"],
    )


def cloudtrail(name: str, **changes: Any) -> dict[str, Any]:
    record = json.loads((FIXTURES / name).read_text())
    record.update(changes)
    return events.cloudtrail(record, event_id=f"evt-{name}", account="111122223333")


def kms_key(key_id: str, **fields: Any) -> KmsKey:
    values: dict[str, Any] = {
        "key_id": key_id,
        "arn": f"arn:aws:kms:us-east-1:111122223333:key/{key_id}",
        "created": NOW - dt.timedelta(days=200),
        "rotation_enabled": True,
        "rotation_period_days": 90,
    }
    values.update(fields)
    return KmsKey(**values)


def test_report_only_sweep_records_and_reports_but_changes_nothing() -> None:
    w = world()
    w.kms.keys = {
        "ok": kms_key("ok"),
        "off": kms_key("off", rotation_enabled=False, rotation_period_days=None),
        "slow": kms_key("slow", rotation_period_days=730),
    }
    w.kms.tags_by_key = {"slow": {"owner": "vision-team"}}
    result = w.run(schedule(kinds=["kms"]))
    assert result["decisions"] == 3 and result["actions"] == 0 and result["findings"] == 2
    assert not [e for e in w.journal.entries if not e.startswith("record")]
    titles = {f.title: f for f in w.sink.findings}
    assert set(titles) == {"KMS key off does not rotate", "KMS key slow rotates every 730 days (policy: 90)"}
    slow = titles["KMS key slow rotates every 730 days (policy: 90)"]
    assert slow.owner == "vision-team" and slow.enforced is False and slow.account == "111122223333"


def test_enforcing_sweep_records_first_then_enables_rotation_with_the_policy_period() -> None:
    w = world(enforce_kms=True, kms_max_rotation_days=120)
    w.kms.keys = {"off": kms_key("off", rotation_enabled=False), "slow": kms_key("slow", rotation_period_days=365)}
    result = w.run(schedule())
    assert result["actions"] == 2
    for key in ("off", "slow"):
        recorded = w.journal.entries.index(f"record arn:aws:kms:us-east-1:111122223333:key/{key} act")
        assert recorded < w.journal.entries.index(f"EnableKeyRotation {key} 120")
    assert all(f.enforced for f in w.sink.findings)
    assert w.kms.keys["slow"].rotation_period_days == 120


def test_on_demand_limit_is_a_finding_not_a_crash() -> None:
    w = world(enforce=True, rotate_on_demand=True)
    w.kms.keys = {
        "imp": kms_key("imp", origin="EXTERNAL", rotation_enabled=False, last_rotation=NOW - dt.timedelta(days=100))
    }
    w.kms.refuse_on_demand = "LimitExceededException"
    result = w.run(schedule(kinds=["kms"]))
    assert result["status"] == "ok" and result["failed_actions"] == 1
    failure = next(f for f in w.sink.findings if f.rule.endswith("action_failed"))
    assert failure.title.startswith("rotate_key failed") and "LimitExceededException" in failure.title
    assert "create a new key" in failure.detail
    [(_, kind_key), *_] = [(k, v) for k, v in w.ledger.items.items() if k[0] == "action"]
    assert kind_key["ok"] is False and kind_key["error_code"] == "LimitExceededException"


def test_access_keys_read_one_report_and_only_flagged_users() -> None:
    w = world(enforce_access_keys=True)
    w.iam.report = REPORT
    # alice's key 1 is 122 days old in the report; the re-read finds it still active and as old.
    w.iam.keys_by_user = {
        "alice": [
            AccessKey(
                user="alice",
                user_arn="alice",
                active=True,
                created=dt.datetime(2026, 8, 1, 9, tzinfo=dt.UTC),
                last_used=NOW - dt.timedelta(days=1),
                key_id="AKIAALICEOLD",
                tags={"owner": "alice@example.com"},
            ),
            AccessKey(
                user="alice",
                user_arn="alice",
                active=True,
                created=dt.datetime(2026, 11, 20, tzinfo=dt.UTC),
                key_id="AKIAALICENEW",
            ),
        ]
    }
    w.run(schedule(kinds=["access_keys"]))
    # alice re-read before deciding, and once more after the deactivation to see it took (the finding's verification)
    assert w.iam.reports_read == 1 and w.iam.users_read == ["alice", "alice"]
    assert "UpdateAccessKey alice AKIAALICEOLD Inactive" in w.journal.entries
    assert w.journal.entries.index("record AKIAALICEOLD act") < w.journal.entries.index(
        "UpdateAccessKey alice AKIAALICEOLD Inactive"
    )
    rules = {f.rule: f for f in w.sink.findings}
    assert set(rules) == {"keys.access_key.too_old", "keys.access_key.root"}
    assert rules["keys.access_key.too_old"].owner == "alice@example.com"
    assert rules["keys.access_key.root"].severity == "critical"


def test_secret_schedule_is_set_only_where_a_rotation_function_exists() -> None:
    w = world(enforce_secrets=True)
    slow = Secret(
        arn="arn:s:slow", name="slow", rotation_enabled=True, lambda_arn=ROTATOR, rules={"AutomaticallyAfterDays": 180}
    )
    bare = Secret(arn="arn:s:bare", name="bare")
    w.secrets.items = {s.arn: s for s in (slow, bare)}
    w.run(schedule(kinds=["secrets"]))
    assert [e for e in w.journal.entries if e.startswith("RotateSecret")] == [
        'RotateSecret arn:s:slow {"AutomaticallyAfterDays": 90}'
    ]
    assert {f.rule for f in w.sink.findings} == {"keys.secret.rotation_interval_too_long", "keys.secret.no_rotation"}


def test_disable_key_rotation_event_rereads_the_key_and_turns_rotation_back_on() -> None:
    w = world(enforce=True)
    key_id = "1234abcd-12ab-34cd-56ef-1234567890ab"
    w.kms.keys = {
        key_id: kms_key(key_id, arn=f"arn:aws:kms:us-west-2:111122223333:key/{key_id}", rotation_enabled=False)
    }
    result = w.run(cloudtrail("disable_key_rotation.json"))
    # read once before deciding, once after enabling rotation to see it on (the finding's verification)
    assert w.kms.reads == 2 and result["trigger"] == "DisableKeyRotation"
    assert f"EnableKeyRotation {key_id} 90" in w.journal.entries
    assert w.ledger.decisions[0][0] == "evt-disable_key_rotation.json"


def test_event_for_a_key_already_fixed_changes_nothing() -> None:
    w = world(enforce=True)
    key_id = "1234abcd-12ab-34cd-56ef-1234567890ab"
    w.kms.keys = {key_id: kms_key(key_id, arn=f"arn:aws:kms:us-west-2:111122223333:key/{key_id}")}
    result = w.run(cloudtrail("enable_key_rotation.json"))
    assert result["actions"] == 0 and w.ledger.decisions[0][1].verdict == "ok"


def test_update_access_key_event_rechecks_that_user() -> None:
    w = world(enforce=True)
    w.iam.keys_by_user = {
        "Bob": [
            AccessKey(
                user="Bob",
                user_arn="Bob",
                active=True,
                created=NOW - dt.timedelta(days=400),
                key_id="AKIAIOSFODNN7EXAMPLE",
            )
        ]
    }
    w.run(cloudtrail("update_access_key.json"))
    # Bob re-read before deciding, and once more after the deactivation to see it took
    assert w.iam.users_read == ["Bob", "Bob"] and w.iam.reports_read == 0
    assert "UpdateAccessKey Bob AKIAIOSFODNN7EXAMPLE Inactive" in w.journal.entries


def test_failed_call_is_recorded_as_ignored_and_nothing_is_read() -> None:
    w = world(enforce=True)
    result = w.run(cloudtrail("enable_key_rotation_failed.json"))
    assert result["decisions"] == 1 and w.kms.reads == 0
    assert w.ledger.decisions[0][1].verdict == "ignored" and "AccessDenied" in w.ledger.decisions[0][1].reasons[0]


def test_a_gone_resource_is_recorded_not_fatal() -> None:
    w = world(enforce=True)
    w.run(cloudtrail("update_secret.json"))
    assert w.ledger.decisions[0][1].reasons == ["the secret no longer exists"]


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ("not an event", "must be a JSON object"),
        ({"id": "x1", "detail-type": "Scheduled Event"}, "invalid GovernorEvent"),
        ({**schedule(), "detail": {"kinds": ["ssh"]}}, "invalid SweepDetail"),
        ({**schedule(), "source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification"}, "unsupported"),
        (cloudtrail("create_key.json", eventName="DeleteAlias"), "not a call the keys enforcer handles"),
        (cloudtrail("disable_key_rotation.json", requestParameters=None, responseElements=None), "names no key"),
        ({**cloudtrail("create_key.json"), "detail": {"eventName": "CreateKey"}}, "invalid CloudTrailEvent"),
    ],
)
def test_bad_input_goes_to_the_dlq_with_its_reason(event: Any, reason: str) -> None:
    w = world(enforce=True)
    result = w.run(event)
    assert result["status"] == "rejected" and reason in result["reason"]
    [(parked, why)] = w.dlq.messages
    assert parked == event and reason in why
    assert not w.ledger.decisions and not w.sink.findings and w.kms.reads == 0


def test_one_run_never_makes_more_than_the_action_budget() -> None:
    w = world(enforce=True)
    w.kms.keys = {f"k{i}": kms_key(f"k{i}", rotation_enabled=False) for i in range(MAX_ACTIONS_PER_RUN + 5)}
    result = w.run(schedule(kinds=["kms"]))
    assert result["actions"] == MAX_ACTIONS_PER_RUN and result["decisions"] == MAX_ACTIONS_PER_RUN + 5
    assert sum(f.rule == "keys.action_budget" for f in w.sink.findings) == 1


def test_a_retry_that_finds_the_key_fixed_still_publishes_the_finding_of_the_first_attempt() -> None:
    w = world(enforce=True)
    w.runtime.sink = RefusesFirstBatch(PublishError("1 findings rejected by EventBridge: ['InternalFailure']"))
    key_id = "1234abcd-12ab-34cd-56ef-1234567890ab"
    w.kms.keys = {
        key_id: kms_key(key_id, arn=f"arn:aws:kms:us-west-2:111122223333:key/{key_id}", rotation_enabled=False)
    }
    event = cloudtrail("disable_key_rotation.json")
    with pytest.raises(PublishError):  # the rotation was switched on; its finding was not accepted: Lambda retries
        w.run(event)
    retried = w.run(event)  # the key is compliant now: nothing to decide, but the staged finding goes out
    assert retried["actions"] == 0 and w.journal.entries.count(f"EnableKeyRotation {key_id} 90") == 1
    (finding,) = w.sink.findings
    assert key_id in finding.resource and finding.id
