"""The hostile set (``bench/hostile.py``) as regression cases: every input the issue listed, and ~270 more.

Each case runs ``governor_cli.main.main`` in-process with a time bound and must end as the contract says (README.md, "The `governor` command"):
the expected exit code, never an exception, and for exit 2 one line on stderr. The few cases that pipe stdout into
``head -1`` run as real subprocesses, because a closed pipe only exists between processes.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from bench.hostile import Case, cases, seed_aws, write_inputs
from governor_cli.main import main
from tests.conftest import ROOT
from tests.reliability.bounds import time_bound

PLACEHOLDER = {"GOVERNOR_HOSTILE_TABLE": "hostile-ledger", "GOVERNOR_HOSTILE_QUEUE": "QUEUE_URL"}
CASES = cases(Path("/HOSTILE"), PLACEHOLDER)  # the names only; the paths are bound to a real folder below
PIPED = [case for case in CASES if case.head and "dlq" not in case.argv]
IN_PROCESS = [case for case in CASES if not case.head]
SECONDS_PER_CASE = 60  # far above any case (most take milliseconds); the old backtest hangs ran for hours


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("hostile")
    write_inputs(folder)
    keys = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    with mock_aws(), pytest.MonkeyPatch.context() as patch:
        for name, value in keys.items():
            patch.setenv(name, value)
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        yield folder, seed_aws()


def _bind(case: Case, folder: Path, env: dict[str, str]) -> Case:
    def real(arg: str) -> str:
        arg = arg.replace("/HOSTILE", str(folder))
        return env["GOVERNOR_HOSTILE_QUEUE"] + arg[len("QUEUE_URL") :] if arg.startswith("QUEUE_URL") else arg

    return Case(case.name, tuple(real(a) for a in case.argv), case.expect, case.stdin, case.head, case.stdout_has)


def _run(case: Case, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO(case.stdin or ""))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), time_bound(SECONDS_PER_CASE, case.name):
        try:
            code = main(list(case.argv))
        except SystemExit as exit_:  # argparse's own exits (usage errors, --help)
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("case", IN_PROCESS, ids=[c.name for c in IN_PROCESS])
def test_hostile_input_ends_as_the_contract_says(
    hostile: tuple[Path, dict[str, str]], case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, env = hostile
    monkeypatch.chdir(ROOT)  # demo looks for the checkout from the working folder
    bound = _bind(case, folder, env)
    code, out, err = _run(bound, monkeypatch)
    assert code in case.expect, f"{case.name}: exit {code}, expected {sorted(case.expect)}: {err.strip()[:300]}"
    if code == 2 and not out.startswith("usage:"):
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("governor: skipped")]
        assert len(lines) == 1 and lines[0].startswith("governor: "), err
    if case.stdout_has and code == 0:
        assert case.stdout_has in out, out[:300]


@pytest.mark.parametrize("case", PIPED, ids=[c.name for c in PIPED])
def test_a_closed_pipe_ends_quietly_with_the_usual_status(hostile: tuple[Path, dict[str, str]], case: Case) -> None:
    folder, env = hostile
    bound = _bind(case, folder, env)
    command = " ".join(shlex.quote(part) for part in (sys.executable, "-m", "governor_cli", *bound.argv))
    done = subprocess.run(
        ["bash", "-c", f"{command} | head -1; exit ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        timeout=SECONDS_PER_CASE,
        cwd=ROOT,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        check=False,
    )
    assert done.returncode in case.expect, (done.returncode, done.stderr[-500:])
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr[-500:]
    assert done.stdout.count("\n") == 1
