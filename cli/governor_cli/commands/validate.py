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


def run(args: argparse.Namespace) -> int:
    from governor_cli.main import UsageError

    if args.ranges:
        for key, allowed, default in ranges():
            print(f"{key:48} {allowed:28} default {default}")
        return 0
    try:
        with policy_warnings() as warned:
            policy, source = resolve_policy(args.file)
    except PolicyError as error:
        raise UsageError(str(error)) from None
    for warning in warned:
        print(f"{source}: warning: {warning}", file=sys.stderr)
    from governor.domain.actions import Notify, Record
    from governor.registry import REGISTRY

    enforcing = [name for name in REGISTRY.sections() if getattr(policy, name).enforce]
    # Sections whose functions only tell people (notifications, reports) deliver; they change no resource.
    delivering = {c.section for c in REGISTRY.values() if all(a in (Notify, Record) for a in c.actions)}
    acting = [name for name in enforcing if name not in delivering]
    mode = f"enforcing: {', '.join(acting)}" if acting else "report-only everywhere"
    told = [name for name in enforcing if name in delivering]
    if told:
        mode += f"; delivering: {', '.join(told)}"
    print(f"{source}: valid ({mode})")
    return 0
