"""Split one verified install of every pinned requirement into the layers of a :class:`~infra.dependencies.LayerPlan`.

pip resolves and installs ``lambdas/requirements.txt`` once (one resolution, one download, the same versions for
every function); each installed distribution then goes to a layer by the functions that need it: a function needs
what its requirements bring, transitively, with the markers evaluated for the runtime (CPython 3.14 on Linux
aarch64, not the build machine). A distribution goes to the smallest layer every one of those functions attaches,
so each function's layers hold its whole closure and no file ships twice. Files move as their distribution's
``RECORD`` lists them; a file no ``RECORD`` owns stops the build (nothing unaccounted for is deployed).
"""

from __future__ import annotations

import csv
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath

from packaging.requirements import Requirement

from infra.dependencies import RUNTIME_PROVIDED, LayerPlan, normalized

#: The runtime's marker environment (PEP 508): Lambda's CPython 3.14 on Amazon Linux 2023, arm64.
TARGET_MARKERS = {
    "implementation_name": "cpython",
    "implementation_version": "3.14.0",
    "os_name": "posix",
    "platform_machine": "aarch64",
    "platform_python_implementation": "CPython",
    "platform_system": "Linux",
    "python_full_version": "3.14.0",
    "python_version": "3.14",
    "sys_platform": "linux",
}


class SplitError(RuntimeError):
    """The install cannot be split into the plan's layers; the message says which file or distribution."""


@dataclass
class Installed:
    """One installed distribution: its ``.dist-info`` folder, its requirements and the files its ``RECORD`` lists."""

    name: str
    version: str
    info: Path
    requires: list[Requirement] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def installed(site: Path) -> dict[str, Installed]:
    """Normalized name -> the distribution, for every ``.dist-info`` in ``site``."""
    found: dict[str, Installed] = {}
    for info in sorted(site.glob("*.dist-info")):
        name, version = info.name[: -len(".dist-info")].rsplit("-", 1)
        meta = (
            HeaderParser().parsestr((info / "METADATA").read_text(encoding="utf-8"))
            if (info / "METADATA").is_file()
            else None
        )
        requires = [Requirement(text) for text in (meta.get_all("Requires-Dist") or [])] if meta else []
        record = info / "RECORD"  # without one, its files are owned by nobody: the split stops on them
        lines = record.read_text(encoding="utf-8").splitlines() if record.is_file() else []
        files = [_site_path(row[0]) for row in csv.reader(lines) if row]  # RECORD is CSV: a path may be quoted
        found[normalized(name)] = Installed(normalized(name), version, info, requires, [f for f in files if f])
    return found


def _site_path(entry: str) -> str:
    """A ``RECORD`` path relative to ``site``: ``--target`` installs put ``../../bin/x`` scripts in ``site/bin``."""
    parts = PurePosixPath(entry).parts
    while parts and parts[0] == "..":
        parts = parts[1:]
    return "/".join(parts)


def target_closure(site: Mapping[str, Installed], roots: list[Requirement]) -> set[str]:
    """The distributions ``roots`` need on the runtime, transitively; the runtime's own (boto3, botocore, s3transfer)
    end the walk: the layers carry none of them, and the runtime brings what they need."""
    found: set[str] = set()
    wanted = [(root, root.extras or {""}) for root in roots]
    while wanted:
        requirement, extras = wanted.pop()
        name = normalized(requirement.name)
        if name in RUNTIME_PROVIDED or name in found:
            continue
        if name not in site:
            raise SplitError(f"{name} is needed on the runtime but pip did not install it")
        found.add(name)
        for needed in site[name].requires:
            if needed.marker is None or any(
                needed.marker.evaluate({**TARGET_MARKERS, "extra": extra}) for extra in extras
            ):
                wanted.append((needed, needed.extras or {""}))
    return found


def placement(site: Mapping[str, Installed], plan: LayerPlan, lines: Mapping[str, Requirement]) -> dict[str, str]:
    """Distribution -> the layer it ships in (absent: no function needs it)."""
    closures = {
        function: target_closure(site, [lines[name] for name in plan.requirements_of(function)])
        for function in plan.functions
    }
    placed: dict[str, str] = {}
    for name in site:
        users = {function for function, closure in closures.items() if name in closure}
        if users:
            layer = min(
                (layer for layer in plan.layers if users <= set(layer.functions)),
                key=lambda layer: (len(layer.functions), layer.name),
            )
            placed[name] = layer.name
    return placed


def split(site: Path, into: Path, plan: LayerPlan, lines: Mapping[str, Requirement]) -> dict[str, list[str]]:
    """Move every file of ``site`` to ``into/<layer>/python`` by its distribution's layer; returns layer -> the
    distributions it holds, plus ``""`` -> the ones no function needs (deleted). ``site`` is left empty."""
    found = installed(site)
    placed = placement(found, plan, lines)
    held: dict[str, list[str]] = {layer.name: [] for layer in plan.layers}
    held[""] = []
    for name, dist in sorted(found.items()):
        layer = placed.get(name, "")
        held[layer].append(name)
        for relative in dist.files:
            source = site / relative
            if not source.is_file():
                continue  # pruned after install (scripts, bytecode) or listed twice
            if layer:
                target = into / layer / "python" / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                source.rename(target)
            else:
                source.unlink()
    left = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    if left:
        raise SplitError(f"{left[0]} (and {len(left) - 1} more) belongs to no installed distribution's RECORD")
    empty = sorted(layer for layer, names in held.items() if layer and not names)
    if empty:
        raise SplitError(f"layer {empty[0]} would hold no distribution: its requirements ship in a wider layer")
    shutil.rmtree(site)
    return held
