"""The layers import downwards only (docs/architecture.md), read from the source, imports inside functions included:
no import cycle anywhere in the runtime, the CLI or the CDK app; the shared domain imports no capability, adapter or
runtime module; a construct imports no stack."""

from __future__ import annotations

from tests.imports import cycles, imports_of, modules

#: What the shared domain (``governor.domain``) may import of the project: itself, the policy model and the event
#: contracts. Not a capability package, not ``governor.adapters``, not the runtime (runner, runtime, outbox, fanout,
#: registry, observability).
DOMAIN_MAY_IMPORT = ("governor.domain", "governor.policy", "governor.events")


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_the_walk_sees_every_package_and_imports_inside_functions() -> None:
    found = modules()
    assert {"governor.domain.actions", "governor_cli.main", "infra.constructs.function"} <= set(found)
    # report's handler builds its adapters inside a function; the walk must see such imports
    assert "governor.report.archive" in {name for _, name in imports_of("governor.report.handler")}


def test_nothing_imports_in_a_cycle() -> None:
    assert cycles() == []


def test_the_shared_domain_imports_no_capability_adapter_or_runtime_module() -> None:
    offenders = [
        f"{name}:{line} imports {target}"
        for name in modules()
        if _within(name, ("governor.domain",))
        for line, target in imports_of(name)
        if not _within(target, DOMAIN_MAY_IMPORT)
    ]
    assert offenders == []


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
