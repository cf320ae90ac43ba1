"""The ``governor`` command's bad-input error, in a module of its own so helpers (``aws_access``) can raise it without
importing the command's entry (``main``, which imports them)."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""
