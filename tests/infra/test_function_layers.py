"""Each function attaches only the layers of what its handler imports (issue 47): the report's chart libraries in the
report's layers only, the Kubernetes client in the idle function's, the Slack SDK where Slack is reached, and the
Spot function, whose cold start is spent inside a two-minute warning, on the base layer alone."""

from __future__ import annotations

import re
from typing import Any

from tests.infra.conftest import Synth

_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*)(?:\[[^\]]*\])?==")


def _requirements_by_function(synth: Synth) -> dict[str, list[str]]:
    """Function (by handler package) -> the requirements its layers hold, as the layers' descriptions list them."""
    layers = synth.resources("AWS::Lambda::LayerVersion")
    found: dict[str, list[str]] = {}
    for function in synth.resources("AWS::Lambda::Function").values():
        properties: dict[str, Any] = function["Properties"]
        handler = str(properties.get("Handler", ""))
        if not handler.startswith("governor."):
            continue
        held: list[str] = []
        for reference in properties.get("Layers", []):
            description = layers[reference["Ref"]]["Properties"]["Description"]
            held += [name.lower().replace("_", "-") for name in _PIN.findall(description.split(": ", 1)[-1])]
        found[handler.split(".")[1]] = held
    return found


def test_each_function_attaches_the_layers_of_what_its_handler_imports(synth: Synth) -> None:
    held = _requirements_by_function(synth)
    assert len(held) >= 9
    assert sorted(held["spot"]) == ["aws-lambda-powertools", "pydantic", "pyyaml"]
    assert {name for name, names in held.items() if "matplotlib" in names} == {"report"}
    assert {name for name, names in held.items() if "lightkube" in names} == {"idle"}
    assert {name for name, names in held.items() if "slack-sdk" in names} == {
        "idle",
        "interactions",
        "notifier",
        "report",
    }
    for name, names in held.items():
        assert len(names) == len(set(names)), f"{name} gets a requirement from two layers"
        assert {"aws-lambda-powertools", "pydantic", "pyyaml"} <= set(names), name


def test_the_layers_are_the_plan_the_import_graph_gives(synth: Synth) -> None:
    """The stack attaches what ``infra.dependencies`` derives from the handlers' imports (the build builds the same),
    never a second hand-kept list; every layer serves some function, none more than Lambda's five."""
    from infra.dependencies import shipped_plan

    plan = shipped_plan()
    held = _requirements_by_function(synth)
    assert {name: sorted(names) for name, names in held.items()} == {
        name: sorted(plan.requirements_of(name)) for name in plan.functions
    }
    functions = synth.resources("AWS::Lambda::Function").values()
    used = {ref["Ref"] for f in functions for ref in f["Properties"].get("Layers", [])}
    assert used == set(synth.resources("AWS::Lambda::LayerVersion")) and len(used) == len(plan.layers)
    assert max(len(layers) for layers in plan.functions.values()) <= 5
