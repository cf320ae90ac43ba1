"""The ``governor`` command's contract: exit 0 / 2 and one-line messages, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from governor import __version__
from governor_cli.main import COMMANDS, build_parser, main
from tests.conftest import ROOT


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_validate_good_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / "governor.yaml")]) == 0
    assert "valid (report-only everywhere; delivering: notifications, reports)" in capsys.readouterr().out


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


def _fresh_python(*args: str) -> subprocess.CompletedProcess[str]:
    """A new interpreter that finds the packages through their folders only (as an installed console script would)."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            "PYTHONPATH": os.pathsep.join(str(ROOT / folder) for folder in ("lambdas", "cli")),
            "PATH": "/usr/bin:/bin",
        },
        check=False,
    )


def test_python_dash_m_entry_point(tmp_path: Path) -> None:
    bad = tmp_path / "g.yaml"
    bad.write_text("idle: [1, 2]\n")
    done = _fresh_python("-m", "governor_cli", "validate", str(bad))
    assert done.returncode == 2
    assert "idle" in done.stderr and "Traceback" not in done.stderr


def test_help_lists_every_command_with_its_own_help_line() -> None:
    import pkgutil

    import governor_cli.commands as package

    assert set(COMMANDS) == {module.name for module in pkgutil.iter_modules(package.__path__)}
    # the listing without importing the commands is the one their own modules register
    assert build_parser(()).format_help() == build_parser().format_help()


def test_a_command_imports_only_its_own_module(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from governor_cli.main import main\n"
        f"code = main(['backtest', '--metrics', {str(tmp_path / 'missing.csv')!r}])\n"
        "print(code, sorted(m for m in sys.modules if m.startswith('governor_cli.commands.')))\n"
    )
    done = _fresh_python("-c", script)
    assert done.stdout.strip() == "2 ['governor_cli.commands.backtest']"
    assert done.stderr.count("\n") == 1 and "missing.csv" in done.stderr and "Traceback" not in done.stderr


def test_a_command_s_own_help_names_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["validate", "--help"])
    assert exited.value.code == 0
    assert "usage: governor validate [-h] [--ranges] [--json] [file]" in capsys.readouterr().out


@pytest.mark.parametrize("hostile", ["a\x1eb", "a\nb", "a\rb", "a\x85b", "a\u2028b", "a\x1b[2Jb"])
def test_an_error_quoting_a_hostile_value_stays_one_line(hostile: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A value with a record separator, line break or terminal escape is quoted escaped, never split or obeyed."""
    code = main(["ledger", "export", "--table", "missing", "--kind", hostile, "--out", "/dev/null"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("governor: ") and "\x1b" not in err
