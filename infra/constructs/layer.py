"""The dependency layers: each function attaches only the layers of what its handler imports, from the verified build.

``infra.dependencies`` derives the layer plan from the handlers' imports (``base`` for what every function needs, then
one layer per group of requirements the same functions import: the report's chart libraries, the idle function's
Kubernetes client, the Slack SDK where Slack is reached). ``make layer`` (cdk.json's ``build`` hook, so before every
``cdk`` command) builds ``build/layer/<layer>/python`` for CPython 3.14 arm64 and writes ``build/layer-manifest.json``
only once the build is complete and verified (``infra.build_layer``). ``app.py`` synthesizes only with that build: a
missing, failed or stale build (the manifest's fingerprint is not today's requirements and plan, or a file in
``build/layer`` was changed, added or removed after the build) stops the synth with one line naming the ``layer``
setting, and each function's code plus layers must fit Lambda's 250 MB unzipped (and its construct's
``UNZIPPED_BUDGET``: the Spot function's 40 MB).

There is no public-layer fallback any more: AWS's public Powertools layer has no slack_sdk, PyYAML or matplotlib,
so the notifier, every policy load and the report would fail at run time.

In-process synths that inspect the template without deploying it (the tests, ``governor demo``'s summary, the
benchmarks) pass ``deployable=False`` to ``infra.app_builder.build_app`` and get the same layers and assignment with
placeholder content, whose description says it cannot be deployed; ``app.py`` never does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_

from infra.build_layer import REQUIREMENTS, code_asset_bytes, fingerprint, size_problem
from infra.dependencies import Layer, LayerPlan, requirement_lines, shipped_plan
from infra.layer_manifest import function_sizes, read, stale
from infra.settings import ROOT, Settings, SettingsError

_CACHE_ATTR = "_governor_layers"
_SIZES_ATTR = "_governor_function_sizes"
PLACEHOLDER_DIR = ROOT / "infra" / "layer_placeholder"
PLACEHOLDER_DESCRIPTION = "PLACEHOLDER for template inspection, not deployable: run make layer and cdk synth"


def _fix(why: str) -> SettingsError:
    return SettingsError(f"context layer=build: {why}; run `make layer` (cdk.json's build hook runs it before cdk)")


def verified_build(settings: Settings, plan: LayerPlan, code_bytes: int) -> dict[str, Any]:
    """The manifest of ``settings.layer_dir``, if it is the verified build of today's requirements and plan, every
    file as built, and every function's code plus layers fits Lambda's limit and its own budget."""
    folder, manifest = settings.layer_dir, settings.layer_manifest
    problem = stale(folder, manifest, fingerprint(REQUIREMENTS, plan))
    if problem:
        raise _fix(f"{_shown(folder)} is not a current build: {problem}")
    record = read(manifest) or {}
    for name, unzipped in function_sizes(record, code_bytes).items():
        problem = size_problem(name, unzipped)
        if problem:
            raise SettingsError(f"context layer=build: {problem}")
    return record


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _description(layer: Layer, plan: LayerPlan, placeholder: bool) -> str:
    """What the layer holds and for whom (Lambda allows 256 characters)."""
    pins = requirement_lines(REQUIREMENTS)
    held = ", ".join(str(pins[name]) for name in layer.requirements)
    users = "every function" if len(layer.functions) == len(plan.functions) else ", ".join(layer.functions)
    text = f"GPU Fleet Governor layer {layer.name} for {users}: {held} (CPython 3.14 arm64)"
    return (f"{PLACEHOLDER_DESCRIPTION}. {text}" if placeholder else text)[:256]


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


def stack_layers(stack: Stack, settings: Settings) -> dict[str, lambda_.ILayerVersion]:
    """The plan's layers in this stack, built once per stack: layer name -> layer version."""
    existing = getattr(stack, _CACHE_ATTR, None)
    if existing is not None:
        return existing
    plan = shipped_plan()
    if settings.deployable:
        code = code_asset_bytes()
        setattr(stack, _SIZES_ATTR, function_sizes(verified_build(settings, plan, code), code))
    layers: dict[str, lambda_.ILayerVersion] = {}
    for layer in plan.layers:
        folder = settings.layer_dir / layer.name if settings.deployable else PLACEHOLDER_DIR
        layers[layer.name] = lambda_.LayerVersion(
            stack,
            f"Layer{_camel(layer.name)}",
            code=lambda_.Code.from_asset(str(folder)),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_14],
            compatible_architectures=[lambda_.Architecture.ARM_64],
            description=_description(layer, plan, placeholder=not settings.deployable),
        )
    setattr(stack, _CACHE_ATTR, layers)
    return layers


def function_layers(
    stack: Stack, settings: Settings, function: str, budget: tuple[int, str] | None = None
) -> list[lambda_.ILayerVersion]:
    """The layers of ``function``'s dependency set (``base`` first), shared with every other function that needs
    them; with the verified build, the function's code plus those layers must stay within its own ``budget``
    (bytes, why), if it has one."""
    layers = stack_layers(stack, settings)
    size = getattr(stack, _SIZES_ATTR, {}).get(function)
    problem = size_problem(function, size, budget) if size is not None else None
    if problem:
        raise SettingsError(f"context layer=build: {problem}")
    return [layers[name] for name in shipped_plan().functions[function]]
