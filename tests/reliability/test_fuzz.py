"""Bad input, generated: malformed, truncated, oversized and type-confused events for every handler, event files for
``governor explain`` and policy files for the loader. The only outcomes allowed are the project's own: a rejection
parked in the DLQ with its reason (handlers) or exit 2 with one line (command line), never an unhandled exception,
never an action."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from governor.policy import Policy, PolicyError, parse_policy_text
from governor_cli.main import main
from governor_cli.testing.deployment import Deployment, handler_names
from governor_cli.testing.events import envelope
from governor_cli.testing.faults import FaultInjector
from governor_cli.testing.invariants import is_action
from governor_cli.testing.scenarios import soak_policy
from tests.conftest import ROOT
from tests.reliability.bounds import time_bound

HANDLERS = handler_names()
SECONDS_PER_EVENT = 30  # one invocation on the in-process emulator takes milliseconds; this only catches hangs
FUZZ = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DETAIL_TYPES = [
    "EC2 Spot Instance Interruption Warning",
    "EC2 Instance Rebalance Recommendation",
    "EC2 Instance State-change Notification",
    "EC2 Command Invocation Status-change Notification",
    "AWS API Call via CloudTrail",
    "Governor Finding",
]
SOURCES = ["aws.ec2", "aws.kms", "aws.iam", "aws.secretsmanager", "aws.ssm", "aws.scheduler", "gpu-fleet-governor"]
EVENT_NAMES = ["AuthorizeSecurityGroupIngress", "RunInstances", "DisableKeyRotation", "CreateAccessKey", "ModifyRule"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=15,
)
oversized = st.integers(min_value=100_000, max_value=400_000).map(lambda n: "x" * n)
ids = st.sampled_from(["i-0123456789abcdef0", "sg-0a1b2c3d4e5f60718", "", "i-", "../../etc/passwd"]) | st.text(
    max_size=30
)
details = st.fixed_dictionaries(
    {},
    optional={
        "instance-id": ids | json_values,
        "instance-action": st.sampled_from(["terminate", "stop", "hibernate"]) | json_values,
        "state": st.sampled_from(["running", "stopped", "terminated"]) | json_values,
        "eventName": st.sampled_from(EVENT_NAMES) | json_values,
        "eventSource": st.sampled_from(["ec2.amazonaws.com", "kms.amazonaws.com"]) | json_values,
        "eventTime": st.just("2026-12-01T10:00:00Z") | json_values,
        "requestParameters": json_values,
        "responseElements": json_values,
        "errorCode": json_values,
        "policy": json_values,
        "severity": json_values,
        "resource": ids | oversized,
    },
)
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "version": st.just("0") | json_values,
        "id": st.uuids().map(str) | json_values | oversized,
        "detail-type": st.sampled_from(DETAIL_TYPES) | json_values,
        "source": st.sampled_from(SOURCES) | json_values,
        "account": st.just("123456789012") | json_values,
        "time": st.just("2026-12-01T10:00:00Z") | json_values,
        "region": st.just("us-east-1") | json_values,
        "resources": st.lists(st.text(max_size=20), max_size=2) | json_values,
        "detail": details | json_values,
    },
)
events = envelopes | json_values


@pytest.fixture(scope="module")
def deployed() -> Iterator[Deployment]:
    with mock_aws(config={"lambda": {"use_docker": False}}):
        deployment = Deployment(soak_policy())
        try:
            yield deployment
        finally:
            deployment.close()


def _assert_only_project_outcomes(deployed: Deployment, function: str, event: Any) -> None:
    with FaultInjector() as recorder, recorder.label("fuzz"), time_bound(SECONDS_PER_EVENT, function):
        result = deployed.invoke(function, event)  # any exception fails the test: Lambda would retry, then DLQ it
    acted = [f"{c.operation} {c.params}"[:200] for c in recorder.calls if is_action(c)]
    assert not acted, f"{function} acted on fuzzed input: {acted}"
    if result.get("status") == "rejected":
        assert result.get("reason"), result
        parked = [c for c in recorder.calls if c.operation == "SendMessage" and c.ok]
        assert parked and parked[0].params["QueueUrl"] == deployed.local.dlq_urls[function]


@pytest.mark.parametrize("function", HANDLERS)
@FUZZ
@given(event=events)
def test_handlers_reject_malformed_events(deployed: Deployment, function: str, event: Any) -> None:
    _assert_only_project_outcomes(deployed, function, event)


@pytest.mark.parametrize("function", HANDLERS)
def test_handlers_reject_non_objects_and_oversized_events(deployed: Deployment, function: str) -> None:
    for event in (None, [], "event", 42, {"detail-type": "x" * 300_000}, {"id": ["not", "a", "string"]}):
        with FaultInjector() as recorder, recorder.label("fuzz"):
            result = deployed.invoke(function, event)
        assert result.get("status") == "rejected", (function, str(event)[:80], result)
        assert not [c for c in recorder.calls if is_action(c)]


def _ec2(detail_type: str, detail: Any, **overrides: Any) -> dict[str, Any]:
    event_id = "6a7e8feb-b491-4cf7-a9f1-bf3703467718"
    return {**envelope(detail_type, "aws.ec2", detail, event_id=event_id, time="2026-12-01T10:00:00Z"), **overrides}


UNEXPECTED_SHAPES = {
    # public fixtures write the id with an underscore; EC2 never does, and "unknown" must never be decided on
    "state-change with instance_id": (
        ("lifecycle", "spot"),
        _ec2("EC2 Instance State-change Notification", {"instance_id": "i-0123456789abcdef0", "state": "stopped"}),
    ),
    "spot warning with instance_id": (
        ("spot",),
        _ec2(
            "EC2 Spot Instance Interruption Warning",
            {"instance_id": "i-0123456789abcdef0", "instance-action": "terminate"},
        ),
    ),
    "state change dated 9999": (
        ("lifecycle", "spot"),
        _ec2(
            "EC2 Instance State-change Notification",
            {"instance-id": "i-0123456789abcdef0", "state": "stopped"},
            time="9999-12-31T23:59:59Z",
        ),
    ),
}


@pytest.mark.parametrize("shape", sorted(UNEXPECTED_SHAPES))
def test_unexpected_shapes_are_parked_with_a_reason_never_decided(deployed: Deployment, shape: str) -> None:
    functions, event = UNEXPECTED_SHAPES[shape]
    for function in functions:
        with FaultInjector() as recorder, recorder.label("shape"):
            result = deployed.invoke(function, event)
        assert result.get("status") == "rejected", (function, result)
        assert result.get("reason") and "unknown" not in str(result.get("resource", "")), result
        parked = [c for c in recorder.calls if c.operation == "SendMessage" and c.ok]
        assert parked and parked[0].params["QueueUrl"] == deployed.local.dlq_urls[function]
        assert not [c for c in recorder.calls if is_action(c)]


def _explain(path: Path, *extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["explain", str(path), "--policy", str(ROOT / "governor.yaml"), *extra])
    return code, out.getvalue(), err.getvalue()


def _valid_event_texts() -> list[str]:
    folder = ROOT / "tests" / "fixtures"
    return [p.read_text(encoding="utf-8") for p in sorted(folder.glob("*/*.json"))] or ['{"detail-type": "x"}']


VALID_TEXTS = _valid_event_texts()
event_files = (
    st.binary(max_size=300)
    | json_values.map(lambda v: json.dumps(v, allow_nan=True))
    | envelopes.map(lambda v: json.dumps(v, allow_nan=True))
    | st.tuples(st.sampled_from(VALID_TEXTS), st.floats(0, 1)).map(lambda t: t[0][: int(len(t[0]) * t[1])])
    | st.integers(min_value=1000, max_value=20_000).map(lambda n: "[" * n + "]" * n)
    | st.integers(min_value=1000, max_value=5_000).map(lambda n: '{"detail": ' * n + "{}" + "}" * n)
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=event_files, as_json=st.booleans())
def test_explain_exits_0_or_2_with_one_line(content: str | bytes, as_json: bool) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "event.json"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", errors="surrogatepass")
        code, out, err = _explain(path, *(["--json"] if as_json else []))
    assert code in (0, 2), (code, err)
    if code == 2:
        assert err.startswith("governor: ") and err.count("\n") == 1 and "Traceback" not in err, err
    else:
        assert out and not err
        if as_json:
            assert json.loads(out)["verdict"] in ("act", "ok", "ignored")


SHIPPED = (ROOT / "governor.yaml").read_text(encoding="utf-8")
policy_texts = (
    st.text(max_size=300)
    | json_values.map(lambda v: json.dumps(v, allow_nan=True))
    | st.floats(0, 1).map(lambda f: SHIPPED[: int(len(SHIPPED) * f)])
    | st.tuples(st.integers(0, 400), json_values).map(
        lambda t: "\n".join(
            line if i != t[0] % max(1, SHIPPED.count("\n")) else f"{line.split(':')[0]}: {json.dumps(t[1])}"
            for i, line in enumerate(SHIPPED.splitlines())
        )
    )
    # nesting just past Python's recursion limit is enough to reach the RecursionError path; deeper is only slower
    | st.integers(min_value=900, max_value=2_500).map(lambda n: "a: " + "[" * n + "]" * n)
    | st.integers(min_value=900, max_value=1_500).map(lambda n: "{a: " * n + "1" + "}" * n)
)


@settings(max_examples=60, deadline=None)
@given(text=policy_texts)
# Found by exploration (issue 46.8, the one-off CI failure): a key holding a line break split the message in two.
@example(text='{"\\n"}')
@example(text='network:\n  training_ports: ["a\\nb"]')  # a validator's message quoting the author's value
# Found by exploration next (seed 2): JSON's surrogate-pair escape is two lone surrogates in YAML; UnicodeEncodeError.
@example(text='network:\n  world_open_allowed_ports: ["\\ud800\\udc00"]')
@example(text="fleet:\n  max_exemption_days: " + "1" * 5_000)  # int() refuses more than 4,300 digits: ValueError
@example(text="a: " + "[" * 1_000 + "]" * 1_000)  # just past the recursion limit
def test_policy_loader_raises_only_policy_errors(text: str) -> None:
    try:
        policy = parse_policy_text(text, source="fuzz.yaml")
    except PolicyError as error:
        message = str(error)
        assert message.startswith("fuzz.yaml") and "\n" not in message.strip(), message
    else:
        assert isinstance(policy, Policy)
