"""Each capability's scenario hooks, found through the registry: its entry's ``demo`` names the CLI module holding
what ``governor demo`` and the reliability runs do for it (``governor_cli.demo.capabilities.<name>``).

Nothing here names a capability: the demo and the reliability scenarios iterate :func:`hooks` in registry order and
call what each module defines. One capability reaches another's scenario only by what it provides
(:func:`provided`: "the hook that can build an idle warning"), never by name.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from types import ModuleType
from typing import Any

from governor.capability import Capability
from governor.registry import REGISTRY


@cache
def hooks() -> tuple[tuple[Capability, ModuleType], ...]:
    """Every capability with scenario hooks and its hook module, in registry order."""
    return tuple((c, import_module(c.demo)) for c in REGISTRY.values() if c.demo)


def defining(attribute: str) -> list[tuple[Capability, Any]]:
    """(capability, its hook module's ``attribute``) for every hook module that defines it, in registry order."""
    return [(c, getattr(module, attribute)) for c, module in hooks() if hasattr(module, attribute)]


def provided(attribute: str) -> Any:
    """The one hook module's ``attribute`` (a role such as ``warning_finding``): exactly one capability provides it."""
    found = defining(attribute)
    if len(found) != 1:
        raise LookupError(f"{attribute}: provided by {[c.name for c, _ in found] or 'no capability'}, not by one")
    return found[0][1]
