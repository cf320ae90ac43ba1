"""The ``governor`` command: the operators' view of the same domain code the Lambdas run.

Exit codes (README.md, "The `governor` command"): 0 success, 1 ran but a check the user asked for failed, 2 bad
input, with one line naming the file and what is wrong, never a traceback. Subcommands live in
``governor_cli.commands``, one module each, imported only when that command runs (:data:`COMMANDS` lists them for
``--help``).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
import warnings
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from governor import __version__
from governor_cli.errors import UsageError

EXIT_OK = 0
EXIT_FAILED_CHECK = 1
EXIT_BAD_INPUT = 2

# Every command (the module ``governor_cli.commands.<name>``) and its help line. ``governor --help`` lists them from
# here, so a run imports only its own command's module and that module's dependencies (the other commands' imports
# cost about 0.15 s of CPU, a third of a ``backtest``'s start); tests/unit/test_cli.py checks this against the modules.
COMMANDS: dict[str, str] = {
    "audit": "run queries/*.sql on DuckDB over CloudTrail files",
    "backtest": "replay the idle policy over exported GPU metrics",
    "cost": "what running the governor costs a month for a fleet, line by line, with sources",
    "demo": "synthesize the stack and run a simulated GPU fleet locally",
    "dlq": "list or re-drive the events parked in a function's dead-letter queue",
    "explain": "show what the governor would decide for one event",
    "idle": "see or re-arm the idle sweep's circuit breaker",
    "ledger": "read the decision ledger",
    "report": "render the security and cost report locally",
    "status": "the GPU fleet, one line per instance (--table), or a deployed governor's health (--stack)",
    "validate": "check a policy file",
}


def _explained(message: str) -> str:
    """A UsageError's line, with botocore's bare "You must specify a region." replaced by what to set."""
    from governor_cli.aws_access import BOTOCORE_NO_REGION, NO_REGION

    return message.replace(BOTOCORE_NO_REGION, NO_REGION) if BOTOCORE_NO_REGION in message else message


@contextmanager
def _aws_region_honoured() -> Iterator[None]:
    """The AWS CLI v2 and the AWS SDKs read ``AWS_REGION`` (it overrides ``AWS_DEFAULT_REGION``); boto3 reads only
    ``AWS_DEFAULT_REGION`` and the profile. For the length of one command, ``AWS_REGION`` is honoured the same way."""
    region, default = os.environ.get("AWS_REGION"), os.environ.get("AWS_DEFAULT_REGION")
    if region:
        os.environ["AWS_DEFAULT_REGION"] = region
    try:
        yield
    finally:
        if region and default is None:
            os.environ.pop("AWS_DEFAULT_REGION", None)
        elif region and default is not None:
            os.environ["AWS_DEFAULT_REGION"] = default


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or nothing when none is close enough."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def one_line(message: object) -> str:
    """``message`` on one line whatever it quotes: the terminal's one escape (``governor.domain.escape.terminal_text``:
    control characters, every character ``str.splitlines`` breaks at and bidirectional overrides as visible escapes),
    so a hostile value a user passed cannot split the error line, move the cursor or reverse the text."""
    from governor.domain.escape import terminal_text

    return terminal_text(message)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        invalid = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if invalid:
            message += did_you_mean(invalid.group(1), re.findall(r"'([^']*)'", invalid.group(2)))
        self.exit(EXIT_BAD_INPUT, f"governor: {one_line(message)}\n")


class _PipeSafe:
    """stdout that survives its reader going away (``governor audit | head -1``).

    The first write to a closed pipe points the descriptor at /dev/null and drops the rest of the output, so the
    command finishes and exits with its usual status, without the BrokenPipeError traceback Python would print.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._detach()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._detach()

    def _detach(self) -> None:
        self.broken = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass  # not a real file descriptor (tests capture output in memory)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``governor`` parser with ``commands`` registered in full (all by default); any other command is listed by
    its name and help line only, without importing its module."""
    parser = _Parser(prog="governor", description="GPU Fleet Governor: governance and cost control for GPU fleets.")
    parser.add_argument("--version", action="version", version=f"governor {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_text in COMMANDS.items():
        if commands is None or name in commands:
            importlib.import_module(f"governor_cli.commands.{name}").register(subparsers)
        else:
            subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs: its first word that is not an option (``governor`` itself takes only flags)."""
    return next((word for word in argv if not word.startswith("-")), None)


@contextmanager
def _policy_warnings_one_line() -> Iterator[None]:
    """A policy's warnings (``governor.policy.PolicyWarning``: a deprecated key) as one line each on stderr, like the
    command's errors, instead of Python's file-and-line form; other warnings show as usual."""
    shown = warnings.showwarning

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        policy = sys.modules.get("governor.policy")  # not loaded: the warning is none of the policy's
        if policy is not None and issubclass(category, policy.PolicyWarning):
            print(f"governor: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    named = command_named(argv)
    parser = build_parser([named] if named in COMMANDS else ())
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    stdout = sys.stdout
    safe = _PipeSafe(stdout)
    sys.stdout = safe
    try:
        with _aws_region_honoured(), _policy_warnings_one_line():
            return int(args.run(args))
    except UsageError as error:
        print(f"governor: {one_line(_explained(str(error)))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as error:
        from governor_cli.aws_access import failure, is_aws_error

        if not is_aws_error(error):
            raise
        # An AWS error no command turned into its own words (credentials, region, a refused call): still one line.
        print(f"governor: {one_line(failure(error, str(named)))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    finally:
        safe.flush()
        sys.stdout = stdout


if __name__ == "__main__":
    raise SystemExit(main())
