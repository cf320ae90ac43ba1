"""The ``governor`` command's contract: exit 0 / 2 and one-line messages, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from governor import __version__
from governor_cli.main import main
from tests.conftest import ROOT


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_validate_good_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / "governor.yaml")]) == 0
    assert "valid (report-only everywhere)" in capsys.readouterr().out


def test_validate_misspelt_key_exits_2_with_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "governor.yaml"
    bad.write_text("network:\n  enforse: true\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert str(bad) in err and "network.enforse" in err and "unknown field" in err
    assert "Traceback" not in err


def test_unknown_subcommand_exits_2() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["frobnicate"])
    assert exited.value.code == 2


def test_python_dash_m_entry_point(tmp_path: Path) -> None:
    bad = tmp_path / "g.yaml"
    bad.write_text("idle: [1, 2]\n")
    done = subprocess.run(
        [sys.executable, "-m", "governor_cli", "validate", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            "PYTHONPATH": os.pathsep.join(str(ROOT / folder) for folder in ("lambdas", "cli")),
            "PATH": "/usr/bin:/bin",
        },
        check=False,
    )
    assert done.returncode == 2
    assert "idle" in done.stderr and "Traceback" not in done.stderr
