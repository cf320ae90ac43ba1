"""``governor validate [FILE]``: check a policy file before it reaches ``cdk synth`` or a Lambda."""

from __future__ import annotations

import argparse
import sys
import types
import typing
from typing import Any

from governor.policy import PolicyError, policy_warnings, resolve_policy


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("validate", help="check a policy file")
    parser.add_argument(
        "file", nargs="?", help="policy file (default: ./governor.yaml, else the shipped default policy)"
    )
    parser.add_argument("--ranges", action="store_true", help="list every number and date with its allowed range")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object: {"file", "valid", "enforcing", "delivering", "warnings"} (or "error", exit 2)',
    )
    parser.set_defaults(run=run)


def ranges(model: Any = None, prefix: str = "") -> list[tuple[str, str, str]]:
    """(field path, allowed range, default) for every number and date in the policy, read from the model itself,
    so the list is the rule ``validate`` enforces and cannot drift from it."""
    import datetime as dt

    from pydantic import BaseModel

    from governor.policy import EARLIEST_DATE, LATEST_DATE, Policy

    found: list[tuple[str, str, str]] = []
    for name, field in (model or Policy).model_fields.items():
        key = f"{prefix}{field.alias or name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += ranges(annotation, key + ".")
            continue
        values = typing.get_args(annotation)
        if typing.get_origin(annotation) is dict and isinstance(values[-1], type) and issubclass(values[-1], BaseModel):
            found += ranges(values[-1], key + ".<name>.")
            continue
        kinds = set(values) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else {annotation}
        if dt.date in kinds:
            found.append((key, f"{EARLIEST_DATE} .. {LATEST_DATE}", str(field.default)))
        elif kinds & {int, float}:
            bounds = {type(m).__name__: m for m in field.metadata}
            low = next(
                (
                    f"{'>' if k == 'Gt' else '>='} {getattr(m, k.lower())}"
                    for k, m in bounds.items()
                    if k in ("Ge", "Gt")
                ),
                "",
            )
            high = next(
                (
                    f"{'<' if k == 'Lt' else '<='} {getattr(m, k.lower())}"
                    for k, m in bounds.items()
                    if k in ("Le", "Lt")
                ),
                "",
            )
            default = "required" if field.is_required() else str(field.default)
            found.append((key, f"{low}, {high}".strip(", "), default))
    return found


def print_ranges(as_json: bool) -> None:
    """``--ranges``: every number and date with its allowed range and default, as lines or one JSON list."""
    import json

    found = ranges()
    if as_json:
        print(json.dumps([{"field": k, "allowed": allowed, "default": d} for k, allowed, d in found], indent=1))
        return
    for key, allowed, default in found:
        print(f"{key:48} {allowed:28} default {default}")


def modes(policy: Any) -> tuple[list[str], list[str]]:
    """The sections that enforce and change resources, and those that deliver (tell people, change nothing)."""
    from governor.domain.actions import Notify, Record
    from governor.registry import REGISTRY

    enforcing = [name for name in REGISTRY.sections() if getattr(policy, name).enforce]
    # Sections whose functions only tell people (notifications, reports) deliver; they change no resource.
    delivering = {c.section for c in REGISTRY.values() if all(a in (Notify, Record) for a in c.actions)}
    return [n for n in enforcing if n not in delivering], [n for n in enforcing if n in delivering]


def run(args: argparse.Namespace) -> int:
    import json

    from governor_cli.main import UsageError

    if args.ranges:
        print_ranges(args.json)
        return 0
    try:
        with policy_warnings() as warned:
            policy, source = resolve_policy(args.file)
    except PolicyError as error:
        if args.json:  # the answer a script reads on stdout; the one line on stderr as for every error
            print(json.dumps({"file": args.file, "valid": False, "error": str(error)}, indent=1))
        raise UsageError(str(error)) from None
    acting, told = modes(policy)
    if args.json:
        warnings = [str(warning) for warning in warned]
        answer = {"file": source, "valid": True, "enforcing": acting, "delivering": told, "warnings": warnings}
        print(json.dumps(answer, indent=1))
        return 0
    for warning in warned:
        print(f"{source}: warning: {warning}", file=sys.stderr)
    mode = f"enforcing: {', '.join(acting)}" if acting else "report-only everywhere"
    if told:
        mode += f"; delivering: {', '.join(told)}"
    print(f"{source}: valid ({mode})")
    return 0
