"""``governor dlq list|replay FUNCTION``: see which events a function could not process, and why; re-drive them.

The queue is the function's on-failure destination (every governor function has one), or ``--queue-url``. Replay
invokes the function asynchronously with the original event and deletes the message only once Lambda accepted it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from governor_cli.main import EXIT_FAILED_CHECK, EXIT_OK


def register(subparsers: Any) -> None:
    from governor_cli.flags import add_region

    parser = subparsers.add_parser("dlq", help="list or re-drive the events parked in a function's dead-letter queue")
    parser.set_defaults(run=lambda _: _usage(parser))
    actions = parser.add_subparsers(dest="dlq_command", metavar="ACTION", parser_class=type(parser))
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("function", help="governor function (spot, idle, ...) or its Lambda function name")
    common.add_argument("--queue-url", help="the DLQ's URL, instead of the function's on-failure destination")
    add_region(common)
    common.add_argument("--limit", type=int, help="at most this many messages (default: every message in the queue)")
    listing = actions.add_parser("list", parents=[common], help="show the parked events and why each failed")
    listing.add_argument("--json", action="store_true", help="one JSON object per line, including the event")
    listing.set_defaults(run=run_list)
    replay = actions.add_parser("replay", parents=[common], help="invoke the function again with parked events")
    replay.add_argument(
        "--id", action="append", default=[], dest="ids", help="message id or event id to re-drive (repeatable)"
    )
    replay.add_argument(
        "--dry-run", action="store_true", help="show which events would be re-driven; invoke and delete nothing"
    )
    replay.set_defaults(run=run_replay)


def _usage(parser: argparse.ArgumentParser) -> int:
    """``governor dlq`` without an action: its own help, exit 2 (bad input)."""
    from governor_cli.main import EXIT_BAD_INPUT

    parser.print_help()
    return EXIT_BAD_INPUT


def _admin(args: argparse.Namespace) -> tuple[Any, str, str]:
    """The adapter, the Lambda function name and the queue URL; lookup failures are usage errors (exit 2)."""
    from governor_cli.aws_access import resolve_region
    from governor_cli.dlq_admin import DlqAdmin, DlqLookupError
    from governor_cli.main import UsageError

    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    admin = DlqAdmin(resolve_region(args.region))
    try:
        if args.queue_url and (args.run is run_list or getattr(args, "dry_run", False)):  # nothing is invoked
            return admin, args.function, args.queue_url
        function = admin.function_name(args.function)
        return admin, function, args.queue_url or admin.queue_url(function)
    except DlqLookupError as error:
        raise UsageError(str(error)) from None


def _aws_errors(func: Any) -> Any:
    """AWS and credential errors end the command with one line (exit 2), never a traceback."""

    def run(args: argparse.Namespace) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        from governor_cli.aws_access import failure

        try:
            return int(func(args))
        except (ClientError, BotoCoreError) as error:
            raise failure(error, f"the DLQ of {args.function}") from None

    return run


@_aws_errors
def run_list(args: argparse.Namespace) -> int:
    from governor.domain.escape import terminal_text as shown

    admin, function, queue = _admin(args)
    letters = admin.peek(queue, args.limit)
    if args.json:
        for letter in letters:
            print(json.dumps({**letter.summary(), "event": letter.event}, default=str))
        return EXIT_OK
    print(f"{len(letters)} event(s) in the DLQ of {shown(function)} ({shown(queue)})")
    for letter in letters:
        print(
            f"  {shown(letter.message_id)}  event {shown(letter.event_id or '-')}  {shown(letter.kind)}  "
            f"[{shown(letter.origin)}]"
        )
        print(f"    why: {shown(letter.reason)}")
    return EXIT_OK


@_aws_errors
def run_replay(args: argparse.Namespace) -> int:
    """Re-drive the selected events; with ``--dry-run``, read the same selection and change nothing (every message
    is made visible again, none is invoked or deleted)."""
    from governor.domain.escape import terminal_text as shown

    admin, function, queue = _admin(args)
    wanted = set(args.ids)
    results = admin.replay(queue, function, wanted or None, args.limit, dry_run=args.dry_run)
    done = [letter for letter, error in results if error is None]
    for letter, error in results:
        if args.dry_run:
            outcome = "would be re-driven and deleted from the DLQ"
        else:
            outcome = "re-driven, deleted from the DLQ" if error is None else f"kept in the DLQ: {error}"
        head = f"  {shown(letter.message_id)}  event {shown(letter.event_id or '-')}  {shown(letter.kind)}"
        print(f"{head}: {shown(outcome)}")
    found = {letter.message_id for letter, _ in results} | {letter.event_id for letter, _ in results}
    missing = sorted(wanted - found)
    for name in missing:
        print(f"  {shown(name)}: not in the DLQ")
    if args.dry_run:
        print(f"dry run: would re-drive {len(results)} event(s) to {shown(function)}; nothing invoked or deleted")
        return EXIT_OK if not missing else EXIT_FAILED_CHECK
    print(f"re-drove {len(done)} of {len(results)} event(s) to {shown(function)}")
    return EXIT_OK if len(done) == len(results) and not missing else EXIT_FAILED_CHECK
