"""``governor validate [FILE]``: check a policy file before it reaches ``cdk synth`` or a Lambda."""

from __future__ import annotations

import argparse
from typing import Any

from governor.policy import PolicyError, load_policy


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("validate", help="check a policy file")
    parser.add_argument("file", nargs="?", default="governor.yaml", help="policy file (default: governor.yaml)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from governor.cli import UsageError

    try:
        policy = load_policy(args.file)
    except PolicyError as error:
        raise UsageError(str(error)) from None
    enforcing = [
        name
        for name in ("idle", "spot", "network", "keys", "lifecycle", "audit", "reports", "notifications")
        if getattr(policy, name).enforce
    ]
    mode = f"enforcing: {', '.join(enforcing)}" if enforcing else "report-only everywhere"
    print(f"{args.file}: valid ({mode})")
    return 0
