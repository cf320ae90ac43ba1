"""The idle policy: idle only by every signal over the whole window, missing data never idle, mark then act."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from governor.domain.fleet import Instance
from governor.idle.assessment import assess
from governor.idle.decide import decide
from governor.idle.domain import GPU_MEMORY_USED, GPU_UTILIZATION, IDLE_SINCE_TAG, Mark, Series
from governor.idle.purchase import checkpoint_command, reclaim_action
from governor.idle.sweep import action_limit, sweep
from governor.policy import Policy, parse_policy

NOW = dt.datetime(2026, 11, 2, 12, 0, tzinfo=dt.UTC)
LAUNCHED = NOW - dt.timedelta(hours=6)


def policy(**idle: Any) -> Policy:
    return parse_policy({"idle": {"enforce": True, **idle}})


def instance(instance_id: str = "i-0a", **changes: Any) -> Instance:
    base: dict[str, Any] = {
        "id": instance_id,
        "type": "g5.xlarge",
        "state": "running",
        "launch_time": LAUNCHED,
        "tags": {"owner": "ana@example.com", "team": "vision", "gpu-fleet": "true"},
    }
    base.update(changes)
    return Instance(**base)


def series(values: list[float | None], end: dt.datetime = NOW) -> Series:
    """One value per minute, the last one the minute before ``end``; None leaves a gap."""
    first = end.timestamp() - 60 * len(values)
    times = [first + 60 * i for i, v in enumerate(values) if v is not None]
    return Series(times, [v for v in values if v is not None])


def signals(util: list[float | None] | None = None, memory: list[float | None] | None = None) -> dict[str, Series]:
    return {
        GPU_UTILIZATION: series(util if util is not None else [0.5] * 240),
        GPU_MEMORY_USED: series(memory if memory is not None else [16_000.0] * 240),
    }


def test_quiet_gpu_with_a_loaded_model_is_idle_with_evidence() -> None:
    result = assess(instance(), signals(), policy(), NOW)
    assert result.status == "idle"
    assert result.evidence["max_gpu_utilization"] == 0.5
    assert result.evidence["gpu_memory_change_mib"] == 0
    assert result.evidence["samples"][GPU_UTILIZATION] == 120
    assert result.evidence["window_start"] == (NOW - dt.timedelta(hours=2)).isoformat()


def test_one_busy_minute_anywhere_in_the_window_means_busy_even_if_the_mean_is_tiny() -> None:
    util = [0.0] * 240
    util[-100] = 40.0  # one request, 100 minutes ago: mean over 2 h is 0.3%
    result = assess(instance(), signals(util=util), policy(), NOW)
    assert result.status == "busy"
    assert "40.0%" in result.reasons[0]


def test_a_spike_before_the_window_does_not_count() -> None:
    util = [0.0] * 240
    util[10] = 90.0  # 230 minutes ago, outside the 120-minute window
    assert assess(instance(), signals(util=util), policy(), NOW).status == "idle"


def test_memory_moving_beyond_the_tolerance_is_activity() -> None:
    memory = [16_000.0] * 200 + [17_000.0] * 40
    result = assess(instance(), signals(memory=memory), policy(), NOW)
    assert result.status == "busy" and "MiB" in result.reasons[0]
    assert assess(instance(), signals(memory=memory), policy(memory_change_tolerance_mib=2048), NOW).status == "idle"


@pytest.mark.parametrize("present", [0, 60, 95])
def test_missing_or_partial_data_is_unmonitored_never_idle(present: int) -> None:
    util: list[float | None] = [None] * (120 - present) + [0.0] * present
    result = assess(instance(), signals(util=util, memory=[16e9] * 120), policy(), NOW)
    assert result.status == "unmonitored"
    assert f"{present} of 120" in result.reasons[0]


def test_no_series_at_all_is_unmonitored() -> None:
    assert assess(instance(), {}, policy(), NOW).status == "unmonitored"


def test_optional_cpu_threshold_is_one_more_signal_and_needs_its_own_data() -> None:
    cpu_policy = policy(cpu_utilization_threshold=10)
    data = signals()
    assert assess(instance(), data, cpu_policy, NOW).status == "unmonitored"  # no CPU data
    busy = {**data, "cpu_utilization": series([5.0] * 100 + [95.0] * 20)}
    assert assess(instance(), busy, cpu_policy, NOW).status == "busy"
    five_minutes = [NOW.timestamp() - 300 * i for i in range(24, 0, -1)]  # basic EC2 monitoring: 24 in 2 h
    quiet = {**data, "cpu_utilization": Series(five_minutes, [2.0] * 24)}
    assert assess(instance(), quiet, cpu_policy, NOW).status == "idle"


def test_launch_grace_exemptions_and_snooze_come_first() -> None:
    p = policy()
    fresh = instance(launch_time=NOW - dt.timedelta(minutes=10))
    assert assess(fresh, signals(), p, NOW).status == "grace"
    exempt = instance(tags={"governor:exempt": "true"})
    assert assess(exempt, signals(), p, NOW).status == "exempt"
    expired = instance(tags={"governor:exempt": "2026-11-01T00:00:00Z"})
    assert assess(expired, signals(), p, NOW).status == "idle"
    snoozed = instance(tags={"governor:keep-until": "2026-11-02T18:00:00Z"})
    assert assess(snoozed, signals(), p, NOW).status == "snoozed"
    by_policy = policy(exemptions={"ids": ["i-0a"]})
    assert assess(instance(), signals(), by_policy, NOW).status == "exempt"


def _step(inst: Instance, mark: Mark | None, p: Policy, at: dt.datetime, util: list[float] | None = None) -> Any:
    data = signals(util=util) if util is not None else signals()
    shifted = {k: Series([t + (at - NOW).total_seconds() for t in s.times], s.values) for k, s in data.items()}
    return decide(inst, assess(inst, shifted, p, at), mark, p, at)


def test_mark_then_act_warns_first_and_stops_only_after_the_warning_period() -> None:
    p = policy()
    inst = instance()
    first = _step(inst, None, p, NOW)
    assert first.outcome == "warned" and first.decision.verdict == "act"
    assert [a.type for a in first.decision.actions] == ["tag", "warn"]
    assert first.decision.actions[0].model_dump()["tags"] == {IDLE_SINCE_TAG: NOW.isoformat()}
    assert first.decision.actions[1].model_dump()["owner"] == "ana@example.com"
    assert first.mark == Mark(idle_since=NOW, warned_at=NOW) and first.finding
    waiting = _step(inst, first.mark, p, NOW + dt.timedelta(minutes=15))
    assert waiting.outcome == "idle" and waiting.decision.verdict == "ok" and not waiting.decision.actions
    acted = _step(inst, waiting.mark, p, NOW + dt.timedelta(minutes=30))
    assert acted.outcome == "acted"
    assert [a.type for a in acted.decision.enforced_actions()] == ["stop", "tag"]
    assert acted.mark is None


def test_activity_between_warning_and_action_clears_the_mark() -> None:
    p = policy()
    tagged = instance(tags={IDLE_SINCE_TAG: NOW.isoformat()})
    mark = Mark(idle_since=NOW, warned_at=NOW)
    util = [0.0] * 230 + [60.0] * 10
    busy = _step(tagged, mark, p, NOW + dt.timedelta(minutes=30), util=util)
    assert busy.outcome == "busy" and busy.mark is None
    assert [a.type for a in busy.decision.actions] == ["untag"]
    assert any("cleared" in r for r in busy.decision.reasons)


def test_a_mark_from_before_the_last_start_is_stale() -> None:
    restarted = instance(launch_time=NOW - dt.timedelta(hours=3))
    stale = Mark(idle_since=NOW - dt.timedelta(hours=5))
    plan = sweep([restarted], {restarted.id: signals()}, {restarted.id: stale}, policy(), NOW)
    assert plan.outcomes[0].outcome == "warned"


@pytest.mark.parametrize(
    ("lifecycle", "root", "expected"),
    [("on-demand", "ebs", "stop"), ("spot", "ebs", "terminate"), ("on-demand", "instance-store", "terminate")],
)
def test_action_follows_lifecycle_and_root_device(lifecycle: str, root: str, expected: str) -> None:
    assert reclaim_action(instance(lifecycle=lifecycle, root_device_type=root), policy().idle) == expected


def test_checkpoint_runs_first_then_the_action_when_it_ends_or_times_out() -> None:
    p = policy(checkpoint_command="touch /tmp/save", checkpoint_timeout_seconds=600)
    inst = instance()
    mark = Mark(idle_since=NOW - dt.timedelta(minutes=30), warned_at=NOW - dt.timedelta(minutes=30))
    first = _step(inst, mark, p, NOW)
    assert first.outcome == "checkpoint"
    assert first.decision.actions[0].model_dump()["command"] == "touch /tmp/save"
    sent = first.mark
    assert sent is not None and sent.checkpoint_sent_at == NOW
    running = Mark(**{**sent.__dict__, "checkpoint_status": "InProgress"})
    assert _step(inst, running, p, NOW + dt.timedelta(minutes=5)).outcome == "idle"
    assert _step(inst, running, p, NOW + dt.timedelta(minutes=15)).outcome == "acted"  # timed out
    done = Mark(**{**sent.__dict__, "checkpoint_status": "Success"})
    acted = _step(inst, done, p, NOW + dt.timedelta(minutes=5))
    assert acted.outcome == "acted" and any("Success" in r for r in acted.decision.reasons)


def test_the_instance_checkpoint_tag_names_a_policy_command_and_never_is_one() -> None:
    p = parse_policy(
        {
            "idle": {"enforce": True, "checkpoint_command": "save-all"},
            "fleet": {"checkpoint_commands": {"torch": "kill -USR1 1"}},
        }
    )
    fleet = {"gpu-fleet": "true"}
    assert checkpoint_command(instance(tags={**fleet, "governor:checkpoint-command": "torch"}), p) == "kill -USR1 1"
    assert checkpoint_command(instance(tags={**fleet, "governor:checkpoint-command": "curl x|sh"}), p) == "save-all"
    assert checkpoint_command(instance(tags=fleet), p) == "save-all"
    assert checkpoint_command(instance(tags={"governor:checkpoint-command": "torch"}), p) is None  # no fleet tags


def _marked_fleet(total: int, idle: int) -> tuple[list[Instance], dict[str, Any], dict[str, Mark]]:
    fleet = [instance(f"i-{n:03d}") for n in range(total)]
    busy = [50.0] * 240
    data = {i.id: signals() if n < idle else signals(util=busy) for n, i in enumerate(fleet)}
    early = NOW - dt.timedelta(minutes=45)
    marks = {i.id: Mark(idle_since=early, warned_at=early) for i in fleet[:idle]}
    return fleet, data, marks


def test_within_both_bounds_the_sweep_acts() -> None:
    fleet, data, marks = _marked_fleet(total=100, idle=10)
    plan = sweep(fleet, data, marks, policy(), NOW)
    assert plan.alarm is None and len(plan.acting()) == 10


def test_rate_limit_acts_on_the_longest_idle_first_and_defers_the_rest_with_their_marks() -> None:
    fleet, data, marks = _marked_fleet(total=100, idle=11)
    newest = fleet[0].id  # marked last: it waits
    marks[newest] = Mark(idle_since=NOW - dt.timedelta(minutes=31), warned_at=NOW - dt.timedelta(minutes=31))
    plan = sweep(fleet, data, marks, policy(), NOW)
    assert plan.alarm is None and len(plan.acting()) == 10 and plan.deferred == 1
    [deferred] = [o for o in plan.outcomes if o.outcome == "deferred"]
    assert deferred.instance.id == newest and deferred.mark == marks[newest]  # kept: first in line next sweep
    assert not deferred.decision.enforced_actions() and deferred.decision.rule == "idle.deferred"
    assert deferred.decision.evidence["status"] == "deferred" and "longest idle first" in deferred.decision.reasons[-1]


def test_a_backlog_drains_over_the_next_sweeps_instead_of_blocking_them() -> None:
    fleet, data, marks = _marked_fleet(total=30, idle=25)  # default bounds: min(10, 20% of 30) = 6 a sweep
    acted_per_sweep = []
    at = NOW
    while True:
        shifted = {
            i: {k: Series([t + (at - NOW).total_seconds() for t in s.times], s.values) for k, s in d.items()}
            for i, d in data.items()
        }
        plan = sweep(fleet, shifted, marks, policy(), at)
        acted = {o.instance.id for o in plan.acting()}
        if not acted:
            break
        acted_per_sweep.append(len(acted))
        fleet = [i for i in fleet if i.id not in acted]
        marks = {o.instance.id: o.mark for o in plan.outcomes if o.mark is not None}
        at += dt.timedelta(minutes=15)
    # 20% of the running fleet (30, 24, 20, 16, ...) rounded down, never below one action; every instance drained
    assert acted_per_sweep[:4] == [6, 4, 4, 3] and sum(acted_per_sweep) == 25 and min(acted_per_sweep) == 1


@pytest.mark.parametrize("size", [1, 2, 4, 5])
def test_small_fleets_are_reclaimable_the_percent_bound_never_rounds_one_action_away(size: int) -> None:
    assert action_limit(size, policy().idle) == 1
    fleet, data, marks = _marked_fleet(total=size, idle=size)
    plan = sweep(fleet, data, marks, policy(), NOW)
    assert len(plan.acting()) == 1 and plan.alarm is None


def test_zero_percent_or_zero_actions_means_nothing_acts() -> None:
    assert action_limit(100, policy(max_fleet_percent=0).idle) == 0
    assert action_limit(100, policy(max_actions_per_sweep=0).idle) == 0


def test_report_only_warns_and_reports_the_action_once_without_enforcing() -> None:
    p = parse_policy({})
    inst = instance()
    warned = _step(inst, None, p, NOW)
    assert [(a.type, a.enforced) for a in warned.decision.actions] == [("tag", False), ("warn", False)]
    acted = _step(inst, warned.mark, p, NOW + dt.timedelta(minutes=30))
    assert acted.outcome == "acted" and not acted.decision.enforced_actions() and acted.finding
    assert warned.finding  # the owner is warned in report-only mode too: findings are messages, not changes
    again = _step(inst, acted.mark, p, NOW + dt.timedelta(minutes=45))
    assert again.outcome == "idle" and again.finding is None


def test_every_verdict_carries_its_evidence_for_the_ledger() -> None:
    fleet = [instance("i-idle"), instance("i-busy"), instance("i-dark")]
    data = {"i-idle": signals(), "i-busy": signals(util=[70.0] * 240), "i-dark": {}}
    plan = sweep(fleet, data, {}, policy(), NOW)
    by_id = {o.instance.id: o.decision for o in plan.outcomes}
    assert by_id["i-idle"].evidence["status"] == "warned"
    assert by_id["i-busy"].evidence["status"] == "busy" and by_id["i-busy"].evidence["max_gpu_utilization"] == 70
    assert by_id["i-dark"].evidence["status"] == "unmonitored" and by_id["i-dark"].severity == "warning"
    assert all(d.policy == "idle" and d.rule and d.rule.startswith("idle.") for d in by_id.values())


def _sweep_at(at: dt.datetime, util: list[float], marks: dict[str, Mark]) -> Any:
    """One sweep at ``at`` over an instance whose utilisation per minute ends just before ``at``."""
    sig = {"i-0a": {GPU_UTILIZATION: series(util, end=at), GPU_MEMORY_USED: series([16_000.0] * len(util), end=at)}}
    plan = sweep([instance()], sig, marks, policy(max_fleet_percent=100), at)
    outcome = plan.outcomes[0]
    if outcome.mark is not None:
        marks["i-0a"] = outcome.mark
    else:
        marks.pop("i-0a", None)
    return outcome


def test_warned_once_after_window_minus_warning_and_acted_when_the_whole_window_is_idle() -> None:
    """Idle since t: warned at t + 90 min, stopped at t + 120 min, as early as a rule that never warns."""
    busy_until = NOW - dt.timedelta(hours=3)
    marks: dict[str, Mark] = {}
    outcomes = []
    for step in range(0, 9):  # until the action: a stopped instance is no longer swept
        at = busy_until + dt.timedelta(minutes=15 * step)
        minutes = int((at - (busy_until - dt.timedelta(hours=3))).total_seconds() // 60)
        util = [80.0] * (minutes - 15 * step) + [0.5] * (15 * step)
        outcomes.append((15 * step, _sweep_at(at, util, marks).outcome))
    warned = [m for m, o in outcomes if o == "warned"]
    acted = [m for m, o in outcomes if o == "acted"]
    assert warned == [90], outcomes  # one warning, when the 90-minute warning window is idle
    assert acted == [120], outcomes  # the action only once the whole 2 h window is idle and the warning 30 min old
    assert all(o == "idle" for m, o in outcomes if 90 < m < 120)  # the early mark is kept, not cleared


def test_activity_after_an_early_warning_clears_the_mark() -> None:
    marks: dict[str, Mark] = {}
    start = NOW - dt.timedelta(hours=4)
    util = [80.0] * 120 + [0.5] * 90
    assert _sweep_at(start + dt.timedelta(minutes=210), util, marks).outcome == "warned"
    util += [60.0] * 15  # the owner came back
    assert _sweep_at(start + dt.timedelta(minutes=225), util, marks).outcome == "busy"
    assert "i-0a" not in marks


def test_report_only_leaves_instances_it_would_have_stopped_out_of_the_rate_limits_fleet() -> None:
    """The preview must defer exactly what enforcing would: stopped instances no longer count towards the 20%."""
    fleet, data, marks = _marked_fleet(total=12, idle=6)
    gone = NOW - dt.timedelta(minutes=15)
    for i in fleet[:4]:  # reported (would have been stopped) a sweep ago, still idle
        marks[i.id] = Mark(idle_since=marks[i.id].idle_since, warned_at=marks[i.id].warned_at, reported_at=gone)
    report_only = sweep(fleet, data, marks, parse_policy({"idle": {"enforce": False}}), NOW)
    enforced = sweep(
        fleet[4:], data, {k: v for k, v in marks.items() if k not in {i.id for i in fleet[:4]}}, policy(), NOW
    )
    # 8 left running: 20% of 8 is 1 action, both ways (12 would have allowed 2)
    assert len(report_only.acting()) == len(enforced.acting()) == 1
    assert report_only.deferred == enforced.deferred == 1
    [deferred] = [o for o in report_only.outcomes if o.outcome == "deferred"]
    assert "20% of 8" in deferred.decision.reasons[-1]


def test_switching_enforcement_on_warns_again_before_acting_on_a_reported_instance() -> None:
    early = NOW - dt.timedelta(hours=3)
    reported = Mark(idle_since=early, warned_at=early, reported_at=early + dt.timedelta(minutes=30))
    outcome = decide(instance(), assess(instance(), signals(), policy(), NOW), reported, policy(), NOW)
    assert outcome.outcome == "warned" and not [a for a in outcome.decision.actions if a.type == "stop"]
    assert outcome.mark == Mark(idle_since=early, warned_at=NOW)  # idle_since kept: first in line once due
    assert "warned again" in outcome.decision.reasons[-1] and "will be stopped" in (outcome.finding or "")


@pytest.mark.parametrize("ids", [("i-000", "i-fff"), ("i-fff", "i-000")])
def test_among_equally_long_idle_the_dearest_goes_first_whatever_the_ids(ids: tuple[str, str]) -> None:
    """Which instance waits a sweep must not depend on random instance ids: the one that gives back most goes first."""
    cheap, dear = instance(ids[0], type="g5.xlarge"), instance(ids[1], type="p4d.24xlarge")
    early = NOW - dt.timedelta(minutes=45)
    marks = {i.id: Mark(idle_since=early, warned_at=early) for i in (cheap, dear)}
    plan = sweep([cheap, dear], {cheap.id: signals(), dear.id: signals()}, marks, policy(max_actions_per_sweep=1), NOW)
    assert [o.instance.id for o in plan.acting()] == [dear.id] and plan.deferred == 1


def test_a_warned_instance_no_longer_idle_withdraws_its_warning_unless_snoozed_or_never_warned() -> None:
    """Issue 37: warned -> busy again is one finding (idle.resumed); a snooze is the Keep click's own end, and a
    warning never published (no warned_at) was never seen, so there is nothing to withdraw."""
    p = policy()
    warned = Mark(idle_since=NOW - dt.timedelta(minutes=100), warned_at=NOW - dt.timedelta(minutes=10))
    busy = [0.5] * 230 + [90.0] * 10
    outcome = _step(instance(), warned, p, NOW, util=busy)
    assert outcome.outcome == "busy" and outcome.mark is None and outcome.decision.rule == "idle.resumed"
    assert outcome.decision.severity == "info" and outcome.decision.evidence["status"] == "busy"
    assert outcome.decision.reasons[0].startswith("GPU utilisation reached 90.0%")
    assert "idle warning of" in outcome.decision.reasons[-1] and "busy again" in (outcome.finding or "")
    exempt = _step(instance(tags={"governor:exempt": "true"}), warned, p, NOW)
    assert exempt.decision.rule == "idle.resumed" and "kept (exempt)" in (exempt.finding or "")
    snoozed = _step(instance(tags={"governor:keep-until": "2026-11-02T18:00:00Z"}), warned, p, NOW)
    assert snoozed.decision.rule == "idle.snoozed" and snoozed.finding is None
    unpublished = _step(instance(), Mark(idle_since=warned.idle_since), p, NOW, util=busy)
    assert unpublished.decision.rule == "idle.busy" and unpublished.finding is None
