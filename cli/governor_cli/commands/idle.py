"""``governor idle status|rearm --table NAME``: see and re-arm the idle sweep's circuit breaker.

The breaker holds instances that turned idle together (a metrics agent or GPU driver failure looks like that) and
re-arms by itself once they are busy again. When they really are idle (a large job ended on every node at once), an
operator checks the agents and re-arms it here: the held instances are released and judged like any other on the
next sweep, starting with their owners' warning. One instance can be released with the tag
``governor:idle-breaker=release`` instead.

In organisation mode every (account, region) the sweep fans out to has its own breaker: ``--target ACCOUNT/REGION``
names it (``fanout.breaker_key``); a target the ledger has never seen swept is an error, not a closed breaker.
``--region`` is where the ledger table lives, as for every command (``governor_cli.flags``). ``governor status
--table`` shows the fleet the breaker guards, one line per instance.
"""

from __future__ import annotations

import argparse
from typing import Any, Protocol

from governor.domain.breaker import BREAKER_KEY, BREAKER_KIND, Breaker, read_breaker, write_breaker
from governor_cli.flags import add_region, add_table, add_target


class BreakerStore(Protocol):
    def get_item(self, kind: str, key: str) -> dict[str, Any] | None: ...

    def claim(self, kind: str, key: str, item: dict[str, Any], *, replacing: tuple[str, Any] | None = None) -> bool: ...


#: How often a re-arm reads again when a running sweep wrote the breaker in between.
REARM_ATTEMPTS = 5


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("idle", help="see or re-arm the idle sweep's circuit breaker")
    actions = parser.add_subparsers(dest="idle_command", metavar="ACTION")
    for name, help_text in (
        ("status", "show whether the breaker is open and which instances it holds"),
        ("rearm", "close the breaker and release the instances it holds"),
    ):
        action = actions.add_parser(name, help=help_text)
        add_table(action, required=True)
        add_region(action)
        add_target(action)
        if name == "status":
            action.add_argument("--json", action="store_true", help="print the breaker as one JSON object")
        else:
            action.add_argument(
                "--dry-run", action="store_true", help="show what a re-arm would release, and change nothing"
            )
        action.set_defaults(run=run, idle_action=name)
    parser.set_defaults(run=_usage)


def _usage(args: argparse.Namespace) -> int:
    from governor_cli.main import UsageError

    raise UsageError("idle needs an action: governor idle status|rearm --table NAME")


def describe(breaker: Breaker) -> str:
    """One line an operator reads: open or closed, since when, and what it holds."""
    if not breaker.open:
        released = f"; {len(breaker.released)} instances released by an operator" if breaker.released else ""
        return f"circuit breaker closed{released}"
    assert breaker.tripped_at is not None
    since = breaker.anomaly_start.isoformat() if breaker.anomaly_start else "unknown"
    until = f", hold until {breaker.hold_until.isoformat()} unless a sign persists" if breaker.hold_until else ""
    why = f" on {breaker.signature}" if breaker.signature else ""
    held = ", ".join(sorted(breaker.held))
    return (
        f"circuit breaker open since {breaker.tripped_at.isoformat()}{why} (instances turned idle from {since}"
        f"{until}); holding {len(breaker.held)}: {held}"
    )


def rearm(store: BreakerStore, key: str = BREAKER_KEY) -> tuple[Breaker, Breaker]:
    """Close the breaker, releasing what it held; returns the state before and after.

    A conditional write on the version read: a sweep writing in between makes this read again and re-arm what is
    there now, so neither write silently undoes the other."""
    for _ in range(REARM_ATTEMPTS):
        before, version = read_breaker(store, key)
        after = before.rearmed()
        if write_breaker(store, after, version, key):
            return before, after
    raise RuntimeError(f"the breaker kept changing while re-arming ({REARM_ATTEMPTS} attempts); run it again")


def breaker_key(target: str | None) -> str:
    """The single-account breaker, or one organisation target's (``--target ACCOUNT/REGION``)."""
    from governor.fanout import breaker_key as target_key
    from governor_cli.fleet_status import target_scope

    if target is None:
        return BREAKER_KEY
    return target_key(*target_scope(target))


def as_json(breaker: Breaker, target: str | None) -> dict[str, Any]:
    """``governor idle status --json``: the breaker's state as data (times in ISO 8601, instance lists sorted)."""

    def when(moment: Any) -> str | None:
        return moment.isoformat() if moment is not None else None

    return {
        "target": target,
        "open": breaker.open,
        "tripped_at": when(breaker.tripped_at),
        "anomaly_start": when(breaker.anomaly_start),
        "hold_until": when(breaker.hold_until),
        "signature": breaker.signature or None,
        "held": sorted(breaker.held),
        "released": sorted(breaker.released),
    }


def run(args: argparse.Namespace) -> int:
    import json

    from botocore.exceptions import BotoCoreError, ClientError

    from governor.adapters.ledger import DynamoLedger
    from governor.domain.escape import terminal_text
    from governor_cli.aws_access import failure
    from governor_cli.commands.ledger import table_region
    from governor_cli.fleet_status import scoped
    from governor_cli.main import UsageError

    key = breaker_key(args.target)
    region = table_region(args.table, args.region)
    try:
        ledger = DynamoLedger(args.table, region=region)
        scoped(ledger, args.target)  # an organisation target the ledger never saw swept is an error
        if args.idle_action == "status":
            breaker = Breaker.from_item(ledger.get_item(BREAKER_KIND, key))
            shown = as_json(breaker, args.target)
            print(json.dumps(shown, indent=1) if args.json else terminal_text(describe(breaker)))
            return 0
        if args.dry_run:
            before = Breaker.from_item(ledger.get_item(BREAKER_KIND, key))
        else:
            before, _ = rearm(ledger, key)
    except (ClientError, BotoCoreError) as error:
        raise failure(error, f"ledger table {args.table}") from None
    except RuntimeError as error:  # the breaker kept changing under the re-arm
        raise UsageError(f"ledger table {args.table}: {error}") from None
    held = terminal_text(", ".join(sorted(before.held)))
    if before.open and args.dry_run:
        print(f"dry run: a re-arm would release {len(before.held)} instances ({held}); nothing changed")
    elif before.open:
        print(f"circuit breaker re-armed: released {len(before.held)} instances ({held})")
    else:
        print("circuit breaker was not open; nothing to re-arm")
    return 0
