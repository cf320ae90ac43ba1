"""The layers import downwards only (docs/architecture.md), read from the source, imports inside functions included:
no import cycle anywhere in the runtime, the CLI or the CDK app, and none in the runtime even counting the imports a
type checker follows (``if TYPE_CHECKING``); the shared domain imports no capability, adapter or runtime module, not
even for a type; nothing the registry loads imports the composed policy; a construct imports no stack."""

from __future__ import annotations

from tests.imports import cycles, imports_of, loaded_by, modules

#: What the shared domain (``governor.domain``) may import of the project: itself, the core policy (the sections every
#: capability may read, and the value types) and the event contracts. Not a capability package, not
#: ``governor.adapters``, not the runtime (runner, runtime, outbox, fanout, registry, observability), not the composed
#: ``governor.policy`` (which sits above the registry).
DOMAIN_MAY_IMPORT = ("governor.domain", "governor.core_policy", "governor.policy_types", "governor.events")


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_the_walk_sees_every_package_and_imports_inside_functions() -> None:
    found = modules()
    assert {"governor.domain.actions", "governor_cli.main", "infra.constructs.function"} <= set(found)
    # report's handler builds its adapters inside a function; the walk must see such imports
    assert "governor.report.archive" in {name for _, name in imports_of("governor.report.handler")}


def test_nothing_imports_in_a_cycle() -> None:
    assert cycles() == []


def test_the_runtime_has_no_cycle_even_for_the_type_checker() -> None:
    """Issue 47: counting ``TYPE_CHECKING`` imports, 14 modules were one knot (the policy, the registry, the shared
    domain and four adapters): the composed ``Policy`` now sits above the registry and nothing under it names it."""
    assert [group for group in cycles(typing=True) if _within(group[0], ("governor", "infra"))] == []


def test_the_shared_domain_imports_no_capability_adapter_or_runtime_module() -> None:
    offenders = [
        f"{name}:{line} imports {target}"
        for name in modules()
        if _within(name, ("governor.domain",))
        for line, target in imports_of(name, typing=True)
        if not _within(target, DOMAIN_MAY_IMPORT)
    ]
    assert offenders == []


def test_nothing_the_registry_loads_imports_the_composed_policy() -> None:
    """The capability declarations, their typed actions and section models, the core policy and the shared domain
    take a ``CorePolicy``: the composed ``Policy`` (``governor.policy``) is built from the registry, above it."""
    below = loaded_by(["governor.registry"], typing=True)
    assert "governor.policy" not in below
    assert {"governor.idle.capability", "governor.idle.actions", "governor.core_policy"} <= below


def test_no_construct_imports_a_stack() -> None:
    """Stacks compose constructs; a construct that needs a stack's output is handed it by the stack."""
    offenders = [
        f"{name}:{line} imports {target}"
        for name in modules()
        if _within(name, ("infra.constructs",))
        for line, target in imports_of(name)
        if _within(target, ("infra.stacks",))
    ]
    assert offenders == []
