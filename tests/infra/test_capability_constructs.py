"""Every registered capability is deployed by one ``CapabilityConstruct``, which builds its function from the registry
entry and registers it under the capability's name (what the organisation hub and the operator roles iterate over)."""

from __future__ import annotations

from governor.registry import REGISTRY
from infra.constructs.function import CapabilityConstruct
from tests.infra.conftest import Synth


def test_each_capability_is_built_once_from_its_registry_entry(synth: Synth) -> None:
    built = [c for c in synth.stack.node.find_all() if isinstance(c, CapabilityConstruct)]
    assert sorted(c.capability.name for c in built) == sorted(REGISTRY)
    for construct in built:
        assert synth.stack.functions[construct.capability.name] is construct.function
        assert construct.function.capability is REGISTRY[construct.capability.name]
