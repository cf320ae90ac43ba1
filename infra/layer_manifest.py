"""What ``make layer`` built, and whether ``build/layer`` still holds exactly that.

The manifest (``build/layer-manifest.json``, beside the layers, not in them) records the build's fingerprint (the
requirements, the runtime targets and the layer plan), each layer's distributions, unzipped size and the SHA-256 of
every file it holds, and each function's layers and size. A build is current only when the fingerprint is today's
and every file in ``build/layer`` is one the build wrote, unchanged: a file edited, added or removed after the build
makes it stale, so ``make layer`` rebuilds it and the synth refuses it (``infra.constructs.layer``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

#: Lambda's "250 MB" is 250 MiB (262,144,000 bytes); sizes are shown in the same unit.
MB = 1_048_576


def file_hashes(folder: Path) -> dict[str, str]:
    """Relative POSIX path -> SHA-256 of every file under ``folder``."""
    hashes: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            hashes[path.relative_to(folder).as_posix()] = digest.hexdigest()
    return hashes


def read(manifest: Path) -> dict[str, Any] | None:
    """The manifest, or None when it is missing, unreadable or not an object."""
    try:
        record = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def stale(out: Path, manifest: Path, fingerprint: str) -> str | None:
    """Why ``out`` is not the verified build ``manifest`` records for ``fingerprint``; None when it is."""
    if not manifest.is_file():
        return f"no verified build ({manifest.name} is missing)"
    record = read(manifest)
    if record is None:
        return f"{manifest.name} is unreadable"
    if record.get("fingerprint") != fingerprint:
        return (
            "it was built from another lambdas/requirements.txt or for other dependency sets than the handlers import"
        )
    layers = record.get("layers")
    if not isinstance(layers, dict) or not layers:
        return "its manifest lists no layer"
    problems: list[str] = []
    present = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    problems += [f"{name}/ was not written by the build" for name in present if name not in layers]
    for name, layer in sorted(layers.items()):
        if not layer.get("distributions"):
            problems.append(f"layer {name} holds no distribution")
        problems += _file_problems(name, layer.get("files") or {}, out / name)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"{problems[0]}{more}"
    return None


def _file_problems(name: str, built: dict[str, str], folder: Path) -> list[str]:
    """Each file of ``folder`` the build did not write, or wrote otherwise, and each one it wrote that is gone."""
    found = file_hashes(folder) if folder.is_dir() else {}
    changed = sorted(path for path in set(found) & set(built) if found[path] != built[path])
    return [
        *(f"{name}/{path} was added after the build" for path in sorted(set(found) - set(built))),
        *(f"{name}/{path} is missing" for path in sorted(set(built) - set(found))),
        *(f"{name}/{path} changed after the build" for path in changed),
    ]


def function_sizes(record: dict[str, Any], code_bytes: int) -> dict[str, int]:
    """Each function's unzipped bytes, code asset plus its layers, from a build's manifest."""
    layers = record.get("layers", {})
    return {
        name: code_bytes + sum(int(layers[layer]["unzipped_bytes"]) for layer in function["layers"])
        for name, function in sorted(record.get("functions", {}).items())
    }


def megabytes(size: int) -> str:
    return f"{size / MB:.1f} MB"
