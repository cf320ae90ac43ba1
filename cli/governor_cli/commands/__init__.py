"""Subcommands of the ``governor`` command; each module exposes ``register(subparsers)``."""
