"""Every subcommand's inputs, generated: metrics files, trail folders, ledger exports, CloudTrail files, flags and
policy values. The contract (README.md, "The `governor` command") is the only outcome allowed: exit 0, 1 (a check the user asked for) or 2
with one line naming what is wrong; never an exception, never a hang (each case runs under a time bound).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import tempfile
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from pydantic import BaseModel

from governor.domain.times import EARLIEST, LATEST
from governor.events.envelopes import InvalidEventError
from governor.explain import explain
from governor.policy import Policy, PolicyError, parse_policy, parse_policy_text
from governor.report.build import build_report
from governor_cli.commands.demo import MAX_HOURS, MAX_INSTANCES, check_options
from governor_cli.commands.ledger import KINDS
from governor_cli.commands.report import read_ledger
from governor_cli.main import UsageError, main
from tests.conftest import ROOT
from tests.reliability.bounds import time_bound

SECONDS = 60  # per case; generous for a loaded CI machine, far below the hours the old hangs ran
POLICY = str(ROOT / "governor.yaml")
SHIPPED = (ROOT / "governor.yaml").read_text(encoding="utf-8")
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _cli(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.MonkeyPatch.context() as patch,
        time_bound(SECONDS, " ".join(argv)[:80]),
    ):
        patch.setattr("sys.stdin", io.StringIO(stdin))
        try:
            code = main(list(argv))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def _contract(code: int, err: str, allowed: tuple[int, ...] = (0, 2)) -> None:
    assert code in allowed, (code, err[-400:])
    if code == 2:
        lines = [line for line in err.splitlines() if not line.startswith("governor: skipped")]
        assert len(lines) == 1 and lines[0].startswith("governor: "), err[-400:]


# --- times: every format a file or flag might hold, far outside the range too ----------------------------------------
datetimes = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30))
epochs = st.integers(min_value=-(10**12), max_value=10**20) | st.floats(allow_nan=True, allow_infinity=True)
time_texts = (
    datetimes.map(lambda d: d.isoformat() + "Z")
    | datetimes.map(lambda d: d.date().isoformat())
    | epochs.map(str)
    | st.sampled_from(["", "soon", "2026-02-30", "2026-13-45", "10000-01-01", "9999-12-31T23:59:59Z", "0001-01-01"])
    | st.text(max_size=25)
)
in_range = st.datetimes(
    min_value=EARLIEST.replace(tzinfo=None), max_value=(LATEST - dt.timedelta(days=2)).replace(tzinfo=None)
)


# --- backtest -------------------------------------------------------------------------------------------------------
rows = st.lists(
    st.tuples(
        time_texts | in_range.map(lambda d: str(int(d.replace(tzinfo=dt.UTC).timestamp()))),
        st.sampled_from(["i-0abc", "i-0def", ""]) | st.text(max_size=8),
        st.sampled_from(["gpu_utilization", "gpu_memory_used", "cpu_utilization", "fan"]),
        st.sampled_from(["0", "0.5", "99", "-1", "nan", "inf", "1e400", "x"]),
    ),
    max_size=40,
)
intervals = st.sampled_from(["15m", "1h", "60s", "24h", "0", "25h", "59s", "99999999999999h", "1.5h", "x"])


@FAST
@given(rows=rows, interval=intervals, as_json=st.booleans())
# found by this test: a field in the buffer's last bytes read a word past the end (IndexError in sim/columnar.py)
@example(rows=[("0", "i-0def", "gpu_utilization", "-1"), ("", "", "fan", "0")], interval="15m", as_json=False)
def test_backtest_honours_the_contract(rows: list[tuple[str, str, str, str]], interval: str, as_json: bool) -> None:
    text = "timestamp,instance_id,metric,value\n" + "".join(",".join(r).replace("\n", " ") + "\n" for r in rows)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.csv"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        code, out, err = _cli(
            "backtest", "--metrics", str(path), "--policy", POLICY, "--interval", interval, *(["--json"] * as_json)
        )
    _contract(code, err)
    if code == 0 and as_json:
        assert json.loads(out)["summary"]["sweeps"] >= 0


@settings(max_examples=10, deadline=None)
@given(far=st.lists(in_range, min_size=1, max_size=6))
def test_backtest_time_grows_with_samples_not_with_the_span(far: list[dt.datetime]) -> None:
    """Single samples spread over two centuries: the sweeps stay within a window's worth per sample."""
    lines = "".join(f"{int(d.replace(tzinfo=dt.UTC).timestamp())},i-0abc,gpu_utilization,1\n" for d in far)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.csv"
        path.write_text("timestamp,instance_id,metric,value\n" + lines, encoding="utf-8")
        code, out, err = _cli("backtest", "--metrics", str(path), "--policy", POLICY, "--json")
    assert code == 0, err
    window_sweeps = (120 + 15) // 15 + 1  # the shipped policy: a 120-minute window, a sweep every 15 minutes
    assert json.loads(out)["summary"]["sweeps"] <= len(far) * window_sweeps


# --- audit ----------------------------------------------------------------------------------------------------------
records = st.fixed_dictionaries(
    {
        "eventTime": time_texts | st.integers() | st.none(),
        "eventName": st.sampled_from(["AuthorizeSecurityGroupIngress", "RunInstances", "ConsoleLogin", "x"]),
        "eventSource": st.sampled_from(["ec2.amazonaws.com", "signin.amazonaws.com"]) | st.integers(),
    },
    optional={
        "requestParameters": st.none() | st.text(max_size=5) | st.dictionaries(st.text(max_size=5), st.integers()),
        "errorCode": st.none() | st.text(max_size=5),
        "userIdentity": st.none() | st.just({"type": "Root"}) | st.integers(),
    },
)
trail_files = st.lists(
    st.one_of(
        st.lists(records, max_size=6).map(lambda r: json.dumps({"Records": r})),
        st.text(max_size=30),
        st.just('{"Records": "x"}'),
    ),
    max_size=3,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=trail_files,
    start=st.none() | time_texts,
    end=st.none() | time_texts,
    query=st.none() | st.sampled_from(["root_account_usage", "root_acount_usage", "x"]),
    fail_on_rows=st.booleans(),
    output=st.sampled_from([[], ["--json"], ["--csv"]]),
)
def test_audit_honours_the_contract(
    files: list[str], start: str | None, end: str | None, query: str | None, fail_on_rows: bool, output: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        for n, text in enumerate(files):
            (Path(folder) / f"f{n}.json").write_text(text, encoding="utf-8", errors="surrogatepass")
        argv = ["audit", "--logs", folder, *output]
        argv += ["--start", start] if start is not None else []
        argv += ["--end", end] if end is not None else []
        argv += ["--query", query] if query else []
        argv += ["--fail-on-rows"] if fail_on_rows else []
        code, _, err = _cli(*argv)
    _contract(code, err, (0, 1, 2) if fail_on_rows else (0, 2))
    if fail_on_rows and not files and code != 2:
        pytest.fail("--fail-on-rows over an empty folder must not pass")


# --- report's ledger export -----------------------------------------------------------------------------------------
scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12) | time_texts
items = st.dictionaries(
    st.sampled_from(
        ["kind", "instance_id", "instance_type", "start", "end", "at", "gpus", "policy", "verdict", "evidence", "x"]
    ),
    scalars | st.dictionaries(st.text(max_size=5), scalars, max_size=3) | st.lists(scalars, max_size=3),
    max_size=8,
).map(lambda d: {"kind": "session", **d} if "kind" not in d else d)


@settings(max_examples=40, deadline=None)
@given(ledger=st.lists(items | scalars, max_size=6), as_array=st.booleans())
def test_a_ledger_export_that_reads_never_breaks_the_report(ledger: list[Any], as_array: bool) -> None:
    text = json.dumps(ledger) if as_array else "".join(json.dumps(item) + "\n" for item in ledger)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.jsonl"
        path.write_text(text, encoding="utf-8")
        try:
            accepted = read_ledger(path)
        except UsageError as error:
            assert str(error).startswith(str(path)) and "\n" not in str(error)
            return
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    with time_bound(SECONDS, "build_report"):
        build_report(
            kind="custom",
            start=start,
            end=start + dt.timedelta(days=7),
            policy=Policy(),
            audit={},
            ledger_items=accepted,
        )


# --- explain: single events and whole CloudTrail files ----------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(records=st.lists(records | scalars, max_size=4), as_json=st.booleans())
def test_explain_of_a_trail_file_gives_one_result_per_record_or_exit_2(records: list[Any], as_json: bool) -> None:
    code, out, err = _cli(
        "explain", "-", "--policy", POLICY, *(["--json"] * as_json), stdin=json.dumps({"Records": records})
    )
    _contract(code, err)
    if code == 0 and as_json:
        assert len(json.loads(out)) == len(records)


# --- ledger export and dlq, on the in-process emulator ----------------------------------------------------------------
@pytest.fixture(scope="module")
def aws() -> Iterator[None]:
    with mock_aws(), pytest.MonkeyPatch.context() as patch:
        for name, value in {
            "AWS_ACCESS_KEY_ID": "x",
            "AWS_SECRET_ACCESS_KEY": "x",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            patch.setenv(name, value)
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        yield


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    kinds=st.lists(
        st.sampled_from(KINDS) | st.sampled_from(["bogus", "decison", "Session"]) | st.text(max_size=8), max_size=3
    ),
    since=st.none() | time_texts,
    table=st.sampled_from(["missing-table", "bad name!", ""]),
)
def test_ledger_export_honours_the_contract(aws: None, kinds: list[str], since: str | None, table: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        argv = ["ledger", "export", "--table", table, "--region", "us-east-1", "--out", f"{folder}/out.jsonl"]
        argv += [arg for kind in kinds for arg in ("--kind", kind)]
        argv += ["--since", since] if since is not None else []
        code, _, err = _cli(*argv)
    _contract(code, err, (2,))  # no such table: every case is bad input, and says which part


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    action=st.sampled_from(["list", "replay", "lst"]),
    function=st.sampled_from(["spot", "spto", ""]) | st.text(max_size=10),
    limit=st.none() | st.integers(min_value=-(2**40), max_value=2**40),
)
def test_dlq_honours_the_contract(aws: None, action: str, function: str, limit: int | None) -> None:
    argv = ["dlq", action, function, "--region", "us-east-1", *(["--limit", str(limit)] if limit is not None else [])]
    code, _, err = _cli(*argv)
    _contract(code, err, (2,))  # no governor function exists here


# --- demo flags: checked before anything starts -----------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    instances=st.integers(min_value=-(10**12), max_value=10**12),
    hours=st.floats(allow_nan=True, allow_infinity=True),
    port=st.integers(min_value=-(10**6), max_value=10**6),
)
def test_demo_flags_are_checked_before_anything_starts(instances: int, hours: float, port: int) -> None:
    import argparse
    import math

    with tempfile.TemporaryDirectory() as folder:
        args = argparse.Namespace(
            instances=instances, hours=hours, port=port, out=folder, cdk_out=folder, skip_synth=True
        )
        valid = (
            1 <= instances <= MAX_INSTANCES and math.isfinite(hours) and 0 < hours <= MAX_HOURS and 0 <= port <= 65535
        )
        if valid:
            check_options(args)
        else:
            with pytest.raises(UsageError):
                check_options(args)


# --- policy values: a policy that validates never crashes the decision code -------------------------------------------
def _numeric_fields(model: type[BaseModel] = Policy, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _numeric_fields(annotation, (*prefix, field.alias or name))
        elif _numeric(annotation):
            found.append((*prefix, field.alias or name))
    return found


def _numeric(annotation: Any) -> bool:
    """int, float or date, alone or in an optional (``int | None``); bool and Literal are not numbers here."""
    if annotation in (int, float, dt.date):
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_numeric(arg) for arg in typing.get_args(annotation))
    return False


NUMERIC = _numeric_fields()
huge = (
    st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.dates().map(lambda d: d)
    | st.sampled_from([0, 1, -1, 2**63, 10**11, 1e308])
)


def test_every_number_and_date_in_the_policy_has_a_documented_range() -> None:
    """Each numeric field states both bounds (pydantic Field ge/gt and le/lt), or a validator that bounds it."""
    unbounded = []
    for path in NUMERIC:
        section: Any = Policy
        for part in path[:-1]:
            section = section.model_fields[part].annotation
        field = next(f for n, f in section.model_fields.items() if (f.alias or n) == path[-1])
        kinds = {type(m).__name__ for m in field.metadata}
        bounded_low = kinds & {"Ge", "Gt"} or "date" in str(field.annotation)
        bounded_high = kinds & {"Le", "Lt"} or "date" in str(field.annotation)
        if not (bounded_low and bounded_high) and path[-1] not in ("version",):
            unbounded.append(".".join(path))
    assert not unbounded, f"policy values without a range: {unbounded}"


@settings(max_examples=80, deadline=None)
@given(path=st.sampled_from(NUMERIC), value=huge)
def test_a_policy_that_validates_never_crashes_the_decision_code(path: tuple[str, ...], value: Any) -> None:
    data: dict[str, Any] = {}
    cursor = data
    for part in path[:-1]:
        cursor = cursor.setdefault(part, {})
    cursor[path[-1]] = value
    try:
        policy = parse_policy(json.loads(json.dumps(data, default=str)))
    except PolicyError as error:
        assert "\n" not in str(error)
        return
    dt.datetime.now(dt.UTC) + dt.timedelta(days=policy.ledger.retention_days)  # the ledger's TTL
    folder = ROOT / "tests" / "fixtures"
    with time_bound(SECONDS, ".".join(path)):
        for fixture in sorted(folder.glob("*/*.json")):
            with contextlib.suppress(InvalidEventError):
                explain(json.loads(fixture.read_text(encoding="utf-8")), policy)
        from governor_cli.commands.backtest import parse_interval, parse_metrics, replay_stretches

        signals = parse_metrics(
            ["timestamp,instance_id,metric,value"]
            + [f"{1764583200 + 60 * m},i-0abc,gpu_utilization,0.1" for m in range(240)]
        )
        replay_stretches(signals, policy, parse_interval("15m"))


@settings(max_examples=30, deadline=None)
@given(line=st.integers(min_value=0, max_value=10_000))
def test_any_key_written_twice_is_an_error_naming_both_lines(line: int) -> None:
    lines = SHIPPED.splitlines()
    keyed = [n for n, text in enumerate(lines) if ":" in text and not text.lstrip().startswith(("#", "-"))]
    n = keyed[line % len(keyed)]
    doubled = [*lines[: n + 1], lines[n].split(":")[0] + ": null", *lines[n + 1 :]]
    if lines[n].rstrip().endswith(":"):  # a section header: the copy must not swallow the section's fields
        return
    try:  # a flow list or map continued on the next lines: a copy inserted after its first line would split it
        yaml.safe_load(lines[n].strip())
    except yaml.YAMLError:
        return
    with pytest.raises(PolicyError, match=rf"line {n + 2}: duplicate key .* \(first at line {n + 1}\)"):
        parse_policy_text("\n".join(doubled), "fuzz.yaml")
