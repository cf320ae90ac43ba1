"""The ``governor`` command: the operators' view of the same domain code the Lambdas run.

Exit codes (DESIGN.md §6): 0 success, 1 ran but a check the user asked for failed, 2 bad input, with one line naming
the file and what is wrong, never a traceback. Subcommands live in ``governor.commands``, one module each.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from governor import __version__

EXIT_OK = 0
EXIT_FAILED_CHECK = 1
EXIT_BAD_INPUT = 2


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"governor: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="governor", description="GPU Fleet Governor: governance and cost control for GPU fleets.")
    parser.add_argument("--version", action="version", version=f"governor {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    import governor.commands as package

    for module in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        importlib.import_module(f"governor.commands.{module.name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.run(args))
    except UsageError as error:
        print(f"governor: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
