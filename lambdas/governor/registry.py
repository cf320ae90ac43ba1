"""Every capability the governor deploys, in the order the stack builds them: one line each, naming its package.

Each package declares itself in its ``capability`` module (``CAPABILITY``, a :class:`governor.capability.Capability`:
its section, triggers, adapters, typed actions and whatever else varies by capability), as Cloud Custodian's resource
map names each resource's module. Everything that needs the list of capabilities (the stack, the composed policy,
the notifier, the report, ``validate``, the demo and the tests) reads :data:`REGISTRY`; adding a capability is its
package and one line here. Importing a declaration is cheap (no handler, no boto3, no model built), so any function
may read the registry.
"""

from __future__ import annotations

from importlib import import_module

from governor.capability import Capability, Registry

#: The capabilities' packages (``governor.<name>``), in the stack's order: logical ids, the composed policy's sections
#: and the synth summary follow it.
CAPABILITIES = (
    "lifecycle",
    "keys",
    "spot",
    "idle",
    "interactions",
    "network",
    "notifier",
    "report",
    "securityhub",
)


def _declared(name: str) -> Capability:
    """``governor.<name>.capability``'s ``CAPABILITY`` (``tests/imports.py`` counts these imports as the registry's)."""
    capability: Capability = import_module(f"governor.{name}.capability").CAPABILITY
    if capability.name != name:
        raise LookupError(f"governor.{name}.capability declares {capability.name!r}, not {name!r}")
    return capability


REGISTRY = Registry(*(_declared(name) for name in CAPABILITIES))
