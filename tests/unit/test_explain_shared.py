"""``governor explain`` states no rule of its own: it runs the handlers' decision functions on assumed live state.

Three checks hold it to that. Every explainer names the decision functions it calls, and each is the very object its
capability's handler calls (identity, not a copy). Replacing a decision function with a spy shows ``explain`` reaching
it for each sample event. And the handler, run on in-memory fakes holding exactly the state ``explain`` assumed,
records the same decision ``explain`` prints (everything but the ``assumptions``).
"""

from __future__ import annotations

import copy
import datetime as dt
import importlib
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from governor.domain.decision import Decision
from governor.events.envelopes import CloudTrailRecord
from governor.explain import explain, registrations
from governor.keys import domain as keys_domain
from governor.keys import explain as keys_explain
from governor.keys.resources import AccessKey, KmsKey, Secret
from governor.lifecycle import domain as lifecycle_domain
from governor.lifecycle import explain as lifecycle_explain
from governor.lifecycle import handler as lifecycle_handler
from governor.network import domain as network_domain
from governor.network import explain as network_explain
from governor.notifier import domain as notify_domain
from governor.notifier import explain as notify_explain
from governor.notifier import handler as notifier_handler
from governor.policy import Policy, parse_policy
from governor.registry import REGISTRY
from governor.runtime import Runtime
from governor.spot import domain as spot_domain
from governor.spot import explain as spot_explain
from governor.spot import handler as spot_handler
from governor_cli.testing.capacity import delivered
from governor_cli.testing.events import cloudtrail
from governor_cli.testing.memory import FixedClock, MemoryDeadLetters, MemoryLedger, MemorySink
from tests.conftest import ROOT
from tests.unit import test_keys_handler as keys_world
from tests.unit import test_lifecycle_handler as lifecycle_world
from tests.unit import test_notify_handler as notify_world
from tests.unit import test_spot_handler as spot_world

FIXTURES = ROOT / "tests" / "fixtures"


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def cloudtrail_event(record: dict[str, Any], event_id: str = "evt-explain") -> dict[str, Any]:
    """A bare CloudTrail record as EventBridge delivers it to a Lambda."""
    return cloudtrail(record, event_id=event_id, account="111122223333")


def public(decision: Decision | dict[str, Any]) -> dict[str, Any]:
    """What explain prints and the ledger keeps alike: everything of the contract but the assumptions."""
    shown = decision.public() if isinstance(decision, Decision) else dict(decision)
    shown.pop("assumptions")
    return shown


def decisions_of(result: dict[str, Any], policy: str) -> list[dict[str, Any]]:
    return [d for d in result["decisions"] if d["policy"] == policy]


def decided(recorded: list[tuple[Any, Any]]) -> Any:
    """The decision a handler recorded before acting. The runner records it once more, with ``evidence.done``, when
    something was done: that second record must be the same decision about the same resource."""
    (_, first), *after = recorded
    assert len(after) <= 1
    assert all(later.resource == first.resource and later.verdict == first.verdict for _, later in after)
    return first


# --- one rule, one place -------------------------------------------------------------------------------------------

HANDLER_OF = {capability.section: capability.module for capability in REGISTRY.values()}


def _reachable(module: ModuleType) -> list[Any]:
    """What a handler module can call by name: its globals, and the attributes of domain modules it imports whole."""
    found = list(vars(module).values())
    for value in vars(module).values():
        if isinstance(value, ModuleType) and (
            value.__name__.startswith("governor.domain.") or value.__name__.endswith(".domain")
        ):
            found.extend(vars(value).values())
    return found


@pytest.mark.parametrize("registration", registrations(), ids=lambda r: f"{r.policy}:{r.func.__name__}")
def test_every_explainer_calls_only_decision_functions_its_handler_calls(registration: Any) -> None:
    assert registration.decides, f"{registration.func.__name__} names no decision function"
    handler = importlib.import_module(HANDLER_OF[registration.policy])
    source = inspect.getsource(handler)
    reachable = _reachable(handler)
    for function in registration.decides:
        assert any(value is function for value in reachable), (handler.__name__, function.__name__)
        assert f"{function.__name__}(" in source, (handler.__name__, function.__name__)


def test_no_explainer_keeps_a_rule_of_its_own() -> None:
    """The old restated rules are gone: no domain module defines ``_explain_*`` helpers or explain-only actions."""
    for module in (
        keys_domain,
        keys_explain,
        spot_domain,
        lifecycle_domain,
        network_domain,
        network_explain,
        notify_domain,
        notify_explain,
        spot_explain,
        lifecycle_explain,
    ):
        own = [name for name in vars(module) if name.startswith("_explain")]
        assert own == [], (module.__name__, own)


def spy_on(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> list[Any]:
    """Replace ``module.name`` with a wrapper that records each call and returns what the original returns."""
    original: Callable[..., Any] = getattr(module, name)
    calls: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def _state_change(state: str) -> dict[str, Any]:
    event = load(FIXTURES / "spot" / "state-change-terminated.json")
    event["detail"]["state"] = state
    return event


def _create_tags() -> dict[str, Any]:
    return cloudtrail_event(
        {
            "eventVersion": "1.08",
            "eventTime": "2026-12-01T10:00:00Z",
            "eventSource": "ec2.amazonaws.com",
            "eventName": "CreateTags",
            "awsRegion": "us-east-1",
            "eventID": "tags-1",
            "userIdentity": {"type": "IAMUser", "userName": "ana", "arn": "arn:aws:iam::111122223333:user/ana"},
            "requestParameters": {
                "resourcesSet": {"items": [{"resourceId": "i-0abc1234def567890"}]},
                "tagSet": {"items": [{"key": "governor:exempt", "value": "forever"}]},
            },
            "responseElements": {"_return": True},
        }
    )


def _finding() -> dict[str, Any]:
    return notify_world.event()


SPIED: list[tuple[str, Callable[[], dict[str, Any]], ModuleType, str]] = [
    ("kms CreateKey", lambda: load(FIXTURES / "keys" / "create_key_symmetric.json"), keys_domain, "decide_kms_key"),
    ("kms CreateKey imported", lambda: load(FIXTURES / "keys" / "create_key.json"), keys_domain, "decide_kms_key"),
    (
        "kms EnableKeyRotation",
        lambda: load(FIXTURES / "keys" / "enable_key_rotation.json"),
        keys_domain,
        "decide_kms_key",
    ),
    (
        "kms DisableKeyRotation",
        lambda: load(FIXTURES / "keys" / "disable_key_rotation.json"),
        keys_domain,
        "decide_kms_key",
    ),
    (
        "kms ScheduleKeyDeletion",
        lambda: load(FIXTURES / "keys" / "schedule_key_deletion.json"),
        keys_domain,
        "decide_kms_key",
    ),
    (
        "kms failed",
        lambda: load(FIXTURES / "keys" / "enable_key_rotation_failed.json"),
        keys_domain,
        "decide_failed_call",
    ),
    (
        "iam CreateAccessKey",
        lambda: load(FIXTURES / "keys" / "create_access_key.json"),
        keys_domain,
        "decide_access_key",
    ),
    (
        "iam UpdateAccessKey",
        lambda: load(FIXTURES / "keys" / "update_access_key.json"),
        keys_domain,
        "decide_access_key",
    ),
    (
        "iam root key",
        lambda: load(FIXTURES / "keys" / "create_access_key_root.json"),
        keys_domain,
        "decide_root_key_event",
    ),
    ("secret RotateSecret", lambda: load(FIXTURES / "keys" / "rotate_secret.json"), keys_domain, "decide_secret"),
    ("secret UpdateSecret", lambda: load(FIXTURES / "keys" / "update_secret.json"), keys_domain, "decide_secret"),
    ("spot warning", lambda: load(FIXTURES / "spot" / "interruption-warning.json"), spot_domain, "decide_warning"),
    (
        "capacity reservation warning",
        lambda: delivered(
            "capacity-reservation-interruption-warning.json",
            {"[instance-id]": "i-0abc12345678", "[Current time in yyyy-mm-ddThh:mm:ssZ]": "2026-12-01T10:15:00Z"},
            {"instance-termination-time": "2026-12-01T10:17:00Z"},
        ),
        spot_domain,
        "decide_warning",
    ),
    (
        "capacity block expiry",
        lambda: delivered(
            "capacity-block-reservation-expiration-warning.json",
            {
                "[ODCR ID]": "cr-0a1b2c3d4e5f60718",
                "[Current time]": "2026-12-01T10:15:00Z",
                "[ODCR End Date]": "2026-12-01T10:55:00Z",
            },
        ),
        spot_domain,
        "decide_warning",
    ),
    (
        "spot rebalance",
        lambda: load(FIXTURES / "spot" / "rebalance-recommendation.json"),
        spot_domain,
        "decide_rebalance",
    ),
    (
        "spot state change",
        lambda: load(FIXTURES / "spot" / "state-change-terminated.json"),
        spot_domain,
        "decide_state_change",
    ),
    (
        "spot command status",
        lambda: load(FIXTURES / "spot" / "command-status-success.json"),
        spot_domain,
        "decide_command_status",
    ),
    (
        "network ingress",
        lambda: load(FIXTURES / "network" / "authorize_nested.json"),
        network_domain,
        "decide_group_call",
    ),
    (
        "network modify rules",
        lambda: load(FIXTURES / "network" / "modify_rules.json"),
        network_domain,
        "decide_group_call",
    ),
    (
        "network public ip",
        lambda: load(FIXTURES / "network" / "run_instances_public.json"),
        network_domain,
        "decide_public_ip",
    ),
    (
        "lifecycle launch",
        lambda: load(FIXTURES / "network" / "run_instances_public.json"),
        lifecycle_domain,
        "decide_launch",
    ),
    ("lifecycle running", lambda: _state_change("running"), lifecycle_domain, "decide_state_change"),
    ("lifecycle stopped", lambda: _state_change("stopped"), lifecycle_domain, "decide_state_change"),
    ("lifecycle tags", _create_tags, lifecycle_domain, "decide_tag_setting"),
    ("notifier finding", _finding, notify_domain, "decide_notification"),
]


@pytest.mark.parametrize(("event", "module", "name"), [s[1:] for s in SPIED], ids=[s[0] for s in SPIED])
def test_explain_reaches_the_handlers_decision_function(
    monkeypatch: pytest.MonkeyPatch, event: Callable[[], dict[str, Any]], module: ModuleType, name: str
) -> None:
    calls = spy_on(monkeypatch, module, name)
    result = explain(event(), parse_policy({}))
    assert calls, f"explain did not call {module.__name__}.{name}"
    assert result["decisions"]


# --- same assumed state, same decision: explain against the handlers on fakes -------------------------------------

KEYS_FIXTURES = [
    "create_key_symmetric.json",
    "create_key.json",
    "enable_key_rotation.json",
    "disable_key_rotation.json",
    "schedule_key_deletion.json",
    "create_access_key.json",
    "update_access_key.json",
    "rotate_secret.json",
    "update_secret.json",
]


@pytest.mark.parametrize("enforce", [False, True], ids=["report-only", "enforcing"])
@pytest.mark.parametrize("name", KEYS_FIXTURES)
def test_keys_handler_records_what_explain_shows(name: str, enforce: bool) -> None:
    event = keys_world.cloudtrail(name)
    world = keys_world.world(enforce=enforce)
    record = CloudTrailRecord.model_validate(event["detail"])
    assumed = keys_explain.assumed_resource(record, world.runtime.policy)
    assert assumed is not None
    state = assumed.state
    world.adapters.clock = FixedClock(record.event_time)
    if isinstance(state, KmsKey):
        world.kms.keys[state.key_id] = state
        world.kms.tags_by_key[state.key_id] = dict(state.tags)
    elif isinstance(state, AccessKey):
        world.iam.keys_by_user[state.user] = [state]
    else:
        assert isinstance(state, Secret)
        world.secrets.items[state.arn] = state
    [shown] = decisions_of(explain(event, world.runtime.policy), "keys")
    assert world.run(event)["status"] == "ok"
    recorded = decided(world.ledger.decisions)
    assert public(recorded) == public(shown)
    assert any(a.startswith("assumed: ") for a in shown["assumptions"])


@pytest.mark.parametrize("name", ["create_access_key_root.json", "enable_key_rotation_failed.json"])
def test_keys_events_judged_from_the_call_alone_match_too(name: str) -> None:
    event = keys_world.cloudtrail(name)
    world = keys_world.world()
    [shown] = decisions_of(explain(event, world.runtime.policy), "keys")
    world.run(event)
    [(_, recorded)] = world.ledger.decisions
    assert public(recorded) == public(shown)


SPOT_POLICIES: list[dict[str, Any]] = [
    {},
    {"enforce": True},
    {"enforce": True, "replacement": "spot", "fallback_instance_types": ["g5.2xlarge"]},
    {"enforce": True, "on_rebalance": "record", "deregister_from_target_groups": False},
]


@pytest.mark.parametrize("spot", SPOT_POLICIES, ids=["default", "enforce", "replace", "record-only"])
@pytest.mark.parametrize("name", ["interruption-warning.json", "rebalance-recommendation.json"])
def test_spot_handler_records_what_explain_shows(name: str, spot: dict[str, Any]) -> None:
    event = load(FIXTURES / "spot" / name)
    world = spot_world.World(**spot)
    instance_id = event["detail"]["instance-id"]
    at = dt.datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
    assumed = spot_explain.assumed_instance(instance_id, world.runtime.policy, at)
    world.reader.instances[instance_id] = assumed.state
    [shown] = decisions_of(explain(event, world.runtime.policy), "spot")
    world.run(event)
    recorded = decided(world.ledger.decisions)
    assert public(recorded) == public(shown)
    assert shown["verdict"] == "act"


@pytest.mark.parametrize("name", ["state-change-terminated.json", "command-status-success.json"])
def test_spot_events_without_an_interruption_record_match_too(name: str) -> None:
    event = load(FIXTURES / "spot" / name)
    world = spot_world.World()
    [shown] = decisions_of(explain(event, world.runtime.policy), "spot")
    world.run(event)
    [(_, recorded)] = world.ledger.decisions
    assert public(recorded) == public(shown)


@pytest.mark.parametrize("state", ["running", "stopping", "stopped", "terminated", "pending"])
def test_lifecycle_handler_records_what_explain_shows_for_a_state_change(state: str) -> None:
    event = _state_change(state)
    world = lifecycle_world.make_world(parse_policy({}))
    instance_id = event["detail"]["instance-id"]
    at = dt.datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
    assumed = lifecycle_explain.assumed_session(instance_id, state, at, world.runtime.policy)
    if assumed.state.instance is not None:
        world.ec2.by_id[instance_id] = assumed.state.instance
    if assumed.state.open_item is not None:
        world.ledger.put_item(lifecycle_domain.OPEN_SESSION, instance_id, dict(assumed.state.open_item))
    [shown] = decisions_of(explain(event, world.runtime.policy), "lifecycle")
    world.send(copy.deepcopy(event))
    [(_, recorded)] = world.ledger.decisions
    assert public(recorded) == public(shown)


def test_lifecycle_handler_records_what_explain_shows_for_a_launch_and_a_tag() -> None:
    event = load(FIXTURES / "network" / "run_instances_public.json")
    policy = parse_policy({})
    world = lifecycle_world.make_world(policy)
    assumed = lifecycle_explain.assumed_launches(CloudTrailRecord.model_validate(event["detail"]), policy)
    assert assumed.state, "the sample launch is a GPU launch"
    world.ec2.by_id.update({i: instance for i, instance in assumed.state.items() if instance is not None})
    shown = decisions_of(explain(event, policy), "lifecycle")
    world.send(copy.deepcopy(event))
    assert [public(d) for _, d in world.ledger.decisions] == [public(d) for d in shown]
    tags = _create_tags()
    world.ledger.decisions.clear()
    shown = decisions_of(explain(tags, policy), "lifecycle")
    world.send(copy.deepcopy(tags))
    assert [public(d) for _, d in world.ledger.decisions] == [public(d) for d in shown]
    assert shown and shown[0]["verdict"] == "act"


@pytest.mark.parametrize(
    "notifications",
    [{}, {"enforce": True}, {"min_severity": "critical"}, {"immediate": "critical"}],
    ids=["default", "enforce", "below-min", "digest"],
)
@pytest.mark.parametrize("severity", ["warning", "critical"])
def test_notifier_records_what_explain_shows(notifications: dict[str, Any], severity: str) -> None:
    policy: Policy = parse_policy({"notifications": notifications})
    rt = Runtime(policy=policy, ledger=MemoryLedger(), sink=MemorySink(), dead_letters=MemoryDeadLetters())
    event = notify_world.event(severity=severity)
    [shown] = decisions_of(explain(event, policy), "notifications")
    notifier_handler.handle(copy.deepcopy(event), rt, notify_world.FakeOutbox(), notify_world.NOW)
    [(_, recorded)] = rt.ledger.decisions  # type: ignore[attr-defined]
    assert public(recorded) == public(shown)


def test_handlers_import_the_shared_functions_not_copies() -> None:
    """The spot and lifecycle handlers name the domain functions explain calls (a copy would fail ``is``)."""
    assert spot_handler.decide_warning is spot_domain.decide_warning
    assert spot_handler.decide_rebalance is spot_domain.decide_rebalance
    assert lifecycle_handler.domain.decide_state_change is lifecycle_domain.decide_state_change
    assert notifier_handler.decide_notification is notify_domain.decide_notification


def test_a_keys_call_naming_no_resource_is_refused_as_the_handler_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from governor_cli.main import main

    record = load(FIXTURES / "keys" / "disable_key_rotation.json") | {
        "requestParameters": None,
        "responseElements": None,
    }
    path = tmp_path / "no-key.json"
    path.write_text(json.dumps(record))
    assert main(["explain", str(path), "--policy", str(ROOT / "governor.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "names no key" in err and "Traceback" not in err
    world = keys_world.world()
    world.run(cloudtrail_event(record))
    assert world.dlq.messages and "names no key" in str(world.dlq.messages[0])
