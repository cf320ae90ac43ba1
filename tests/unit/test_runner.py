"""The generic runner and the typed actions' ``execute``: what every capability's act path promises, on fakes."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from governor import runner
from governor.domain.actions import Acting, Action, Checkpoint, Notify, Outcome, Tag, Untag
from governor.domain.decision import Decision, Finding
from governor.domain.fleet import Instance
from governor.idle.actions import Stop, Terminate
from governor.keys.actions import DeactivateAccessKey, EnableKeyRotation, RotateKey, SetSecretRotation
from governor.network.actions import RemovePublicIp, RevokeIngress
from governor.outbox import Outbox
from governor.policy import Policy, parse_policy
from governor.registry import REGISTRY
from governor.spot.actions import CompleteLifecycleAction, Deregister, Replace
from governor.spot.ports import Deregistration
from governor_cli.testing.memory import MemoryLedger, MemorySink

NOW = dt.datetime(2026, 12, 3, 6, 0, tzinfo=dt.UTC)
EVERYTHING_ON = parse_policy(
    {
        "idle": {"asg_action": "scale_in"},
        "spot": {"replacement": "spot", "deregister_from_target_groups": True, "complete_lifecycle_action": True},
    }
)
INSTANCE = Instance("i-0123456789abcdef0", "g5.xlarge", "running", NOW, lifecycle="spot", zone="us-east-1a")

#: The AWS API each adapter method the actions call is (reads an adapter declares itself are not listed).
CALLS = {
    "actions.stop": "ec2:StopInstances",
    "actions.terminate": "ec2:TerminateInstances",
    "actions.tag": "ec2:CreateTags",
    "actions.untag": "ec2:DeleteTags",
    "groups.scale_in": "autoscaling:TerminateInstanceInAutoScalingGroup",
    "groups.revoke": "ec2:RevokeSecurityGroupIngress",
    "commands.send": "ssm:SendCommand",
    "addresses.disassociate": "ec2:DisassociateAddress",
    "addresses.drop_auto_assigned": "ec2:ModifyNetworkInterfaceAttribute",
    "kms.enable_rotation": "kms:EnableKeyRotation",
    "kms.rotate_on_demand": "kms:RotateKeyOnDemand",
    "iam.deactivate": "iam:UpdateAccessKey",
    "secrets.set_rotation": "secretsmanager:RotateSecret",
    "recovery.deregister": "elasticloadbalancing:DeregisterTargets",
    "recovery.complete_lifecycle_action": "autoscaling:CompleteLifecycleAction",
    "recovery.replace": "ec2:RunInstances",
}
READS = {"instances.instance", "commands.find"}


class _Answer:
    """Whatever an adapter returns: a delivered command, a replacement, an ok outcome, a lifecycle note."""

    delivered = True
    command_id = "cmd-1"
    error = None
    instance_id = "i-0fedcba9876543210"
    reason = None
    attempts = ()
    note = "continued"
    ok = True
    error_code = None
    message = ""
    done = ""


class Recorder:
    """Every adapter of every capability at once; records ``adapter.method`` for each call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, adapter: str) -> Any:
        recorder = self

        class _Adapter:
            def __getattr__(self, method: str) -> Any:
                def call(*args: Any, **kwargs: Any) -> Any:
                    recorder.calls.append(f"{adapter}.{method}")
                    if method == "instance":
                        return None
                    if method == "find":
                        return None
                    if method == "revoke":
                        return True
                    if method == "deregister":
                        return Deregistration(["tg-1"], [])
                    if method in ("enable_rotation", "rotate_on_demand", "deactivate", "set_rotation"):
                        return Outcome(ok=True)
                    return _Answer()

                return call

        return _Adapter()


class _Secret:
    arn = "arn:aws:secretsmanager:us-east-1:111122223333:secret:db-AbCdEf"
    lambda_arn = None


ENFORCED: list[Action] = [
    Stop(enforced=True),
    Terminate(enforced=True),
    Terminate(enforced=True, via="autoscaling", group="trainers"),
    Tag(enforced=True, tags={"governor:idle-action": "stop"}, remove=["governor:idle-since"]),
    Untag(enforced=True),
    Checkpoint(enforced=True, command="kill -USR1 1", timeout=60),
    RevokeIngress(enforced=True, group_id="sg-1", rule_ids=["sgr-1"], protocol="tcp", ports="22", source="0.0.0.0/0"),
    RemovePublicIp(enforced=True, instance_id="i-1", method="disassociate_address", association_id="eipassoc-1"),
    RemovePublicIp(
        enforced=True, instance_id="i-1", method="modify_network_interface_attribute", network_interface_id="eni-1"
    ),
    EnableKeyRotation(enforced=True, key_id="k-1", rotation_period_days=90),
    RotateKey(enforced=True, key_id="k-1"),
    DeactivateAccessKey(enforced=True, user="alice", access_key_id="AKIA0000000000000001"),
    SetSecretRotation(enforced=True, secret_id="db", rotation_rules={"AutomaticallyAfterDays": 30}),
    Deregister(enforced=True),
    CompleteLifecycleAction(enforced=True),
    Replace(enforced=True),
]


@pytest.mark.parametrize(
    "action", ENFORCED, ids=lambda a: f"{a.type}-{getattr(a, 'via', None) or getattr(a, 'method', '')}"
)
def test_execute_calls_only_what_its_permissions_declare(action: Action) -> None:
    """IAM is derived from the actions: moving the act code into ``execute`` must not call outside ``permissions``."""
    aws = Recorder()
    live = _Secret() if isinstance(action, SetSecretRotation) else INSTANCE
    at = Acting("e-1", INSTANCE.id, EVERYTHING_ON, ledger=MemoryLedger(), live=live, label="test checkpoint")
    outcome = action.execute(aws, at)
    assert outcome.ok and outcome.done
    writes = [call for call in aws.calls if call not in READS]
    assert writes, "an enforced action changes something"
    declared = action.permissions(EVERYTHING_ON)
    if isinstance(action, Tag) and action.remove:  # documented: dropping keys takes Untag's permission
        declared |= Untag.permissions(EVERYTHING_ON)
    assert {CALLS[call] for call in writes} <= declared


def test_every_action_with_permissions_executes_something() -> None:
    """An action that declares IAM actions carries them out itself (nothing is left to a handler's own branch)."""
    executed = {type(action) for action in ENFORCED}
    assert {cls for cls in REGISTRY.actions().values() if cls.permissions(EVERYTHING_ON)} == executed


def test_a_checkpoint_is_sent_once_per_event_however_often_it_is_executed() -> None:
    aws, ledger = Recorder(), MemoryLedger()
    at = Acting("e-1", INSTANCE.id, EVERYTHING_ON, ledger=ledger, label="idle checkpoint")
    first = Checkpoint(enforced=True, command="true", timeout=60).execute(aws, at)
    again = Checkpoint(enforced=True, command="true", timeout=60).execute(aws, at)
    assert aws.calls.count("commands.send") == 1
    assert first.data["command_id"] == again.data["command_id"] == "cmd-1"


def test_a_checkpoint_with_an_intent_is_sent_once_across_events() -> None:
    """Idle's checkpoint is once per idle spell: the next sweep (another event) of the same spell looks it up."""
    aws, ledger = Recorder(), MemoryLedger()
    spell = f"idle-spell:{INSTANCE.id}:2026-11-30T09:00:00+00:00"
    sweeps = [Acting(e, INSTANCE.id, EVERYTHING_ON, ledger=ledger, label="idle", intent=spell) for e in ("s-1", "s-2")]
    outcomes = [Checkpoint(enforced=True, command="true", timeout=60).execute(aws, at) for at in sweeps]
    assert aws.calls.count("commands.send") == 1
    assert {o.data["command_id"] for o in outcomes} == {"cmd-1"}
    other = Acting("s-3", INSTANCE.id, EVERYTHING_ON, ledger=ledger, label="idle", intent=spell + "-next")
    Checkpoint(enforced=True, command="true", timeout=60).execute(aws, other)
    assert aws.calls.count("commands.send") == 2  # a new spell checkpoints again


# --- the runner ----------------------------------------------------------------------------------------------------


def _decision(*actions: Action) -> Decision:
    return Decision(policy="network", verdict="act", resource="sg-1", actions=list(actions), reasons=["open to all"])


def _findings(decision: Decision, results: Any) -> list[Finding]:
    done = "; ".join(o.done for _, o in results or () if o.done) or "nothing yet"
    return [Finding(policy="network", rule="r", severity="warning", resource=decision.resource, title="t", detail=done)]


class _Failing(Recorder):
    def __getattr__(self, adapter: str) -> Any:
        if adapter == "groups":
            raise RuntimeError("throttled")
        return super().__getattr__(adapter)


def _run(aws: Any, policy: Policy = EVERYTHING_ON) -> tuple[runner.Run, MemoryLedger, MemorySink]:
    ledger, sink = MemoryLedger(), MemorySink()
    return runner.Run("e-1", ledger, policy, aws, Outbox(ledger, sink, event_id="e-1")), ledger, sink


def test_record_stage_act_record_outcome_restage_in_that_order() -> None:
    run, ledger, sink = _run(Recorder())
    revoke = RevokeIngress(enforced=True, group_id="sg-1", rule_ids=["sgr-1"], protocol="tcp", ports="22")
    settled = run.settle(_decision(revoke, Notify(enforced=True)), findings=_findings)
    # notify is the runtime's: nothing executed for it; the revoke is followed by the re-read that verifies it
    assert run.aws.calls == ["groups.revoke", "groups.group"]
    [(kind, _)] = [key for key in ledger.items if key[0] == runner.ACTION_KIND]
    item = ledger.items[(kind, f"sg-1#e-1#{revoke.type}")]
    assert item["ok"] is True and item["done"].startswith("revoked sgr-1") and item["policy"] == "network"
    assert [d.evidence.get("done") for _, d in ledger.decisions] == [None, settled.done]
    [finding] = settled.findings
    assert finding.detail.startswith("revoked sgr-1") and not sink.findings  # staged, the caller's outbox publishes
    run.outbox.flush()  # type: ignore[union-attr]
    assert [f.id for f in sink.findings] == [finding.id]


def test_a_held_action_is_not_taken_and_the_reason_is_recorded() -> None:
    run, ledger, _ = _run(Recorder())
    decision = _decision(Stop(enforced=True))
    instead = decision.model_copy(update={"verdict": "ok"})
    settled = run.settle(decision, reread=lambda _: runner.Hold("skipped: restarted", instead))
    assert run.aws.calls == [] and settled.done == ["skipped: restarted"]
    assert [d.verdict for _, d in ledger.decisions] == ["act", "ok"]


def test_a_failed_call_is_recorded_and_reported_then_raised_for_lambda_to_retry() -> None:
    run, ledger, _ = _run(_Failing())
    with pytest.raises(RuntimeError, match="throttled"):
        run.settle(_decision(RevokeIngress(enforced=True, group_id="sg-1", rule_ids=["sgr-1"])), findings=_findings)
    item = ledger.items[(runner.ACTION_KIND, "sg-1#e-1#revoke_ingress")]
    assert item["ok"] is False and item["error_code"] == "RuntimeError"
    [staged] = [v for (k, _), v in ledger.items.items() if k == "outbox"]
    assert "revoke_ingress failed: throttled" in staged["finding"]


def test_a_contained_failure_is_an_outcome_and_the_other_actions_still_run() -> None:
    run, _, _ = _run(_Failing())
    settled = run.settle(
        _decision(RevokeIngress(enforced=True, group_id="sg-1", rule_ids=["sgr-1"]), Stop(enforced=True)),
        contain=lambda action: action.type == "revoke_ingress",
    )
    assert [(a.type, o.ok) for a, o in settled.results] == [("revoke_ingress", False), ("stop", True)]


def test_before_can_take_the_place_of_executing() -> None:
    run, _, _ = _run(Recorder())
    budget = Outcome(ok=False, error_code="ActionBudget")
    settled = run.settle(_decision(Stop(enforced=True)), before=lambda _: budget)
    assert run.aws.calls == [] and settled.results[0][1] is budget


def test_without_an_idempotency_table_the_work_runs_unwrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    runs: list[int] = []
    for _ in range(2):
        runner.once_per_event(event={"id": "e-1"}, name="t", work=lambda: runs.append(1) or {"ok": True})
    assert len(runs) == 2


# --- the re-read after acting: what a finding may call resolved -----------------------------------------------------


class _Group:
    def __init__(self, *rule_ids: str) -> None:
        self.rules = [type("Rule", (), {"rule_id": rule_id})() for rule_id in rule_ids]


class _Groups:
    """A security group whose revoke AWS accepts; ``comes_back`` puts the rule back (another actor re-adds it)."""

    def __init__(self, comes_back: bool = False) -> None:
        self.comes_back = comes_back

    def revoke(self, group_id: str, rule_id: str) -> bool:
        return True

    def group(self, group_id: str) -> _Group:
        return _Group("sgr-1") if self.comes_back else _Group("sgr-9")


class _Aws:
    def __init__(self, groups: _Groups) -> None:
        self.groups = groups


def _own_finding(decision: Decision, results: Any) -> list[Finding]:
    return [Finding.from_decision(decision, "world-open rule")]


def test_a_fix_the_reread_sees_makes_the_decisions_own_finding_verified_fixed() -> None:
    ledger, sink = MemoryLedger(), MemorySink()
    run = runner.Run("e-1", ledger, EVERYTHING_ON, _Aws(_Groups()), Outbox(ledger, sink, event_id="e-1"))
    revoke = RevokeIngress(enforced=True, group_id="sg-1", rule_ids=["sgr-1"])
    settled = run.settle(_decision(revoke).model_copy(update={"rule": "network.world-open"}), findings=_own_finding)
    [finding] = settled.findings
    assert finding.verified is not None and finding.verified.fixed and "gone from sg-1" in finding.verified.seen
    run.outbox.flush()  # type: ignore[union-attr]
    assert sink.findings[0].verified == finding.verified  # what the bus carries is what the outbox staged
    assert ledger.items[(runner.ACTION_KIND, "sg-1#e-1#revoke_ingress")]["verified"]["fixed"] is True


def test_an_accepted_fix_the_reread_does_not_see_is_not_verified() -> None:
    ledger, sink = MemoryLedger(), MemorySink()
    run = runner.Run("e-1", ledger, EVERYTHING_ON, _Aws(_Groups(comes_back=True)), Outbox(ledger, sink, event_id="e-1"))
    revoke = RevokeIngress(enforced=True, group_id="sg-1", rule_ids=["sgr-1"])
    settled = run.settle(_decision(revoke).model_copy(update={"rule": "network.world-open"}), findings=_own_finding)
    [finding] = settled.findings
    assert finding.verified is not None and not finding.verified.fixed
    assert finding.verified.seen == "rule(s) sgr-1 still in sg-1"


def test_a_refused_fix_is_not_verified_and_says_the_refusal() -> None:
    refused = Outcome(ok=False, error_code="UnsupportedOperationException", message="Imported key material.")
    run, _, _ = _run(Recorder())
    decision = Decision(
        policy="keys",
        verdict="act",
        resource="k-1",
        rule="keys.kms.rotation_off",
        actions=[EnableKeyRotation(enforced=True, key_id="k-1")],
    )
    settled = run.settle(decision, findings=_own_finding, before=lambda _: refused)
    [finding] = settled.findings
    assert finding.verified is not None and not finding.verified.fixed
    assert finding.verified.seen == "enable_key_rotation failed: UnsupportedOperationException: Imported key material."
