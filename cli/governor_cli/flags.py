"""The flags several commands share, each declared once so a name means one thing in every command.

``--region`` is always the AWS region the command calls (never a filter, never an organisation target);
``--target ACCOUNT/REGION`` names one organisation target; ``--only-account`` / ``--only-region`` narrow what a
command reads from the ledger; ``--table`` is the ledger table; ``--policy`` falls back to ./governor.yaml, then to
the shipped default. tests/unit/test_cli_conventions.py holds every subcommand to this.
"""

from __future__ import annotations

import argparse

REGION_HELP = "AWS region to call (default: the table ARN's, else AWS_REGION / AWS_DEFAULT_REGION / the profile's)"
TARGET_HELP = "organisation mode: one member account and region the hub sweeps, as ACCOUNT/REGION"
TABLE_HELP = "the ledger's DynamoDB table name or ARN (stack output LedgerTableName)"
POLICY_HELP = "policy file (default: ./governor.yaml, else the shipped default policy)"
ONLY_ACCOUNT_HELP = "only this AWS account's records (12 digits); repeatable or a comma list"
ONLY_REGION_HELP = "only this region's records (us-east-1); repeatable or a comma list"
QUIET_HELP = "no progress bar on stderr (it is drawn only on a terminal, for work over ~2 s)"


def add_region(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--region", metavar="NAME", help=REGION_HELP)


def add_target(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--target", metavar="ACCOUNT/REGION", help=TARGET_HELP)


def add_table(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, required: bool) -> None:
    parser.add_argument("--table", metavar="NAME", required=required, help=TABLE_HELP)


def add_policy(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--policy", metavar="FILE", help=POLICY_HELP)


def add_only_filters(parser: argparse.ArgumentParser) -> None:
    """``--only-account`` and ``--only-region``: repeatable, each also a comma list."""
    parser.add_argument("--only-account", action="append", dest="accounts", metavar="ID", help=ONLY_ACCOUNT_HELP)
    parser.add_argument("--only-region", action="append", dest="regions", metavar="NAME", help=ONLY_REGION_HELP)


def add_quiet(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--quiet", "-q", action="store_true", help=QUIET_HELP)
