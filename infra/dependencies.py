"""Which runtime dependencies each function ships: what its handler really imports, and the layers that carry them.

Every function used to carry one 152 MB layer (numpy, matplotlib, Pillow and fontTools among it), the Spot function
too, whose cold start is spent inside a two-minute interruption warning; only the report draws a chart. Here each
registered handler's dependency set is derived from the import graph (``infra.imports``: every module the handler can
reach, inside functions too) and ``lambdas/requirements.txt``: a pinned requirement belongs to a function when one of
its reachable modules imports a top-level name that requirement's distribution provides. Requirements needed by the
same functions form one layer (``base`` for those every function needs), so a function's layers hold exactly the
requirements it imports, each once. ``make layer`` builds those layers (``infra.build_layer``), the stack gives each
function its own (``infra.constructs.layer``), and the CPython 3.14 import check imports each function's modules
against exactly its layers (``governor_cli.testing.layer_import``).

The mapping from import names to distributions is the installed environment's (the venv the CDK app runs in holds
``lambdas/requirements.txt``, as ``requirements.txt`` includes it): what imports ``yaml`` needs ``PyYAML``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from governor.registry import REGISTRY, Capability
from infra.imports import RUNTIME
from infra.settings import LAMBDAS_DIR

REQUIREMENTS = LAMBDAS_DIR / "requirements.txt"
#: Distributions the Lambda Python runtime ships as a matched set; no layer carries one of them.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
#: The layer every function has: the requirements every handler imports.
BASE = "base"
#: Lambda attaches at most five layers to a function.
MAX_LAYERS = 5
#: Imports the walker sees that never run inside a function, and why: (module, top-level name) -> reason.
NOT_IN_LAMBDA: dict[tuple[str, str], str] = {
    ("governor.idle.checks", "numpy"): "the idle checks take NumPy arrays only from the CLI's columnar backtest "
    "(governor_cli.sim.columnar), which imports NumPy itself; a sweep in the Lambda passes plain numbers, so the "
    "element-wise branch and its import never run there",
}
#: The registry, which loads each capability's declaration by name (the import walker counts those) and, for the
#: report, the notifier and the Security Hub export, the modules capabilities declare (``Capability.loaded_by_name``).
BY_NAME = "governor.registry"


class DependencyError(ValueError):
    """A handler imports what no pinned requirement provides, or a pin serves no handler; the message says which."""


def normalized(name: str) -> str:
    """A distribution name as packaging compares them (``PyYAML`` -> ``pyyaml``, ``slack_sdk`` -> ``slack-sdk``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(requirements: Path = REQUIREMENTS) -> dict[str, Requirement]:
    """Normalized name -> the requirement as written (extras kept), for every requirement line."""
    found: dict[str, Requirement] = {}
    for raw in requirements.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            found[normalized(requirement.name)] = requirement
    return found


def reachable(capability: Capability) -> set[str]:
    """Every runtime module the capability's handler can import: its own graph (the registry's capability declarations
    included), and, once the registry is reached, the modules capabilities declare that it loads by name."""
    found = RUNTIME.loaded_by([capability.module])
    if BY_NAME in found:
        found |= RUNTIME.loaded_by(module for c in REGISTRY.values() for module in c.loaded_by_name)
    return found


def runtime_reachable() -> set[str]:
    """Every runtime module some registered handler can import."""
    return set().union(*(reachable(capability) for capability in REGISTRY.values()))


def third_party(capability: Capability) -> dict[str, set[str]]:
    """Top-level name -> the reachable modules that import it, outside the project and the standard library, without
    the imports :data:`NOT_IN_LAMBDA` explains."""
    found: dict[str, set[str]] = {}
    for module in reachable(capability):
        for top in RUNTIME.third_party_imports(module):
            if (module, top) not in NOT_IN_LAMBDA:
                found.setdefault(top, set()).add(module)
    return found


@cache
def _providers() -> dict[str, frozenset[str]]:
    return {top: frozenset(normalized(d) for d in dists) for top, dists in metadata.packages_distributions().items()}


def installed_closure(requirements: Iterable[Requirement]) -> set[str]:
    """The installed distributions ``requirements`` bring (their extras included), transitively, by normalized name."""
    wanted = list(requirements)
    found: set[str] = set()
    while wanted:
        requirement = wanted.pop()
        name = normalized(requirement.name)
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.requires(requirement.name) or []
        except metadata.PackageNotFoundError:
            continue
        extras = requirement.extras or {""}
        for text in requires:
            needed = Requirement(text)
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra}) for extra in extras):
                wanted.append(needed)
    return found


def needs(capability: Capability, lines: Mapping[str, Requirement]) -> tuple[str, ...]:
    """The requirements (normalized names) whose distributions the capability's handler imports. An import provided
    only through another requirement (``urllib3`` through Powertools' X-Ray SDK) or by the Lambda runtime needs no
    line of its own; anything else is an error naming the module."""
    direct: set[str] = set()
    indirect: dict[str, set[str]] = {}
    for top, importers in third_party(capability).items():
        dists = _providers().get(top, frozenset({normalized(top)}))
        if dists & set(RUNTIME_PROVIDED):
            continue
        pinned = dists & set(lines)
        if pinned:
            direct |= pinned
        else:
            indirect[top] = importers
    available = installed_closure([*(lines[name] for name in direct), *map(Requirement, RUNTIME_PROVIDED)])
    for top, importers in sorted(indirect.items()):
        if not _providers().get(top, frozenset({normalized(top)})) & available:
            raise DependencyError(
                f"{sorted(importers)[0]} imports {top}, which no requirement of lambdas/requirements.txt the "
                f"{capability.name} function imports provides: pin it there, or say in "
                "infra.dependencies.NOT_IN_LAMBDA why the import never runs in the Lambda"
            )
    return tuple(sorted(direct))


@dataclass(frozen=True)
class Layer:
    """One layer: the requirements it is built from and the functions that attach it."""

    name: str
    requirements: tuple[str, ...]
    functions: tuple[str, ...]


@dataclass(frozen=True)
class LayerPlan:
    """Every layer, and each function's layers (``base`` first): what ``make layer`` builds and the stack attaches."""

    layers: tuple[Layer, ...]
    functions: Mapping[str, tuple[str, ...]]

    def layer(self, name: str) -> Layer:
        return next(layer for layer in self.layers if layer.name == name)

    def requirements_of(self, function: str) -> tuple[str, ...]:
        """The requirements a function's layers are built from."""
        return tuple(sorted(r for name in self.functions[function] for r in self.layer(name).requirements))

    def as_json(self) -> dict[str, object]:
        """The plan as the manifest records it (and as the build's fingerprint covers it)."""
        return {
            "layers": {layer.name: {"requirements": list(layer.requirements)} for layer in self.layers},
            "functions": {name: list(layers) for name, layers in sorted(self.functions.items())},
        }

    def fingerprint(self) -> str:
        return json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"))


def layer_plan(requirements: Path = REQUIREMENTS, capabilities: Iterable[Capability] | None = None) -> LayerPlan:
    """Group the pinned requirements by the set of functions that import them: one layer per group."""
    lines = requirement_lines(requirements)
    entries = list(REGISTRY.values() if capabilities is None else capabilities)
    wanted = {capability.name: needs(capability, lines) for capability in entries}
    users: dict[str, tuple[str, ...]] = {
        requirement: tuple(sorted(name for name, needed in wanted.items() if requirement in needed))
        for requirement in lines
    }
    unused = sorted(requirement for requirement, users_of in users.items() if not users_of)
    if unused:
        raise DependencyError(
            f"lambdas/requirements.txt pins {', '.join(unused)}, which no handler imports: remove it, or the layers "
            "would ship it to no function"
        )
    everyone = tuple(sorted(wanted))
    groups: dict[tuple[str, ...], list[str]] = {}
    for requirement, users_of in users.items():
        groups.setdefault(users_of, []).append(requirement)
    layers = tuple(
        sorted(
            (
                Layer(BASE if users_of == everyone else "-".join(sorted(names)), tuple(sorted(names)), users_of)
                for users_of, names in groups.items()
            ),
            key=lambda layer: (layer.name != BASE, layer.name),
        )
    )
    attached = {name: tuple(layer.name for layer in layers if name in layer.functions) for name in sorted(wanted)}
    for name, names in attached.items():
        if len(names) > MAX_LAYERS:
            raise DependencyError(
                f"the {name} function would need {len(names)} layers ({', '.join(names)}); Lambda attaches at most "
                f"{MAX_LAYERS}"
            )
    return LayerPlan(layers, attached)


@cache
def shipped_plan() -> LayerPlan:
    """The plan of the shipped registry and ``lambdas/requirements.txt`` (computed once per process)."""
    return layer_plan()
