"""``governor explain EVENT.json``: what the governor would decide for one event, acting on nothing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from governor.events.envelopes import InvalidEventError
from governor.policy import PolicyError, load_policy


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("explain", help="show what the governor would decide for one event")
    parser.add_argument("event", help="an EventBridge event or a CloudTrail record, as JSON")
    parser.add_argument("--policy", default="governor.yaml", help="policy file (default: governor.yaml)")
    parser.add_argument("--json", action="store_true", help="print the decision object as JSON")
    parser.set_defaults(run=run)


def _read_event(path: str) -> Any:
    from governor.cli import UsageError

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot read the event ({error.__class__.__name__})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{path}: not valid JSON (line {error.lineno}: {error.msg})") from None
    except RecursionError:
        raise UsageError(f"{path}: JSON nested too deeply") from None


def render_text(result: dict[str, Any]) -> str:
    lines = [f"event {result['event']['id']} ({result['event']['kind']}): {result['verdict'].upper()}"]
    if not result["decisions"]:
        lines.append("  no policy handles this event")
    for decision in result["decisions"]:
        lines.append(f"  [{decision['policy']}] {decision['verdict']} {decision['resource']}")
        for reason in decision["reasons"]:
            lines.append(f"    why: {reason}")
        for action in decision["actions"]:
            mode = "enforced" if action.get("enforced") else "report-only"
            details = ", ".join(f"{k}={v}" for k, v in action.items() if k not in {"type", "enforced"})
            lines.append(f"    do:  {action['type']} ({mode}){': ' + details if details else ''}")
        for assumption in decision["assumptions"]:
            lines.append(f"    assumes: {assumption}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from governor.cli import UsageError
    from governor.domain.explain import explain

    try:
        policy = load_policy(args.policy)
    except PolicyError as error:
        raise UsageError(str(error)) from None
    raw = _read_event(args.event)
    try:
        result = explain(raw, policy)
    except InvalidEventError as error:
        raise UsageError(f"{args.event}: {error}") from None
    print(json.dumps(result, indent=2, default=str) if args.json else render_text(result))
    return 0
