"""Stand-in layer builds: ``make layer``'s own code (``infra.build_layer.build``) over stand-in wheels, no network.

pip is replaced by :func:`stand_in_pip`, which installs, for every pin of the requirements file, a distribution of
that name and version as pip would (a package, its ``.dist-info`` with ``METADATA``, ``WHEEL`` and ``RECORD``); the
build's own verification, split, hashing and manifest run unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from unittest import mock

from infra import build_layer


def stand_in_pip(site: Path, requirements: Path) -> None:
    """One small pure-Python distribution per ``name==version`` line of ``requirements``."""
    for raw in requirements.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9._-]+)(\[[^\]]*\])?==(\S+)", line)
        if match is None:
            continue
        name, version = re.sub(r"[-_.]+", "_", match.group(1)).lower(), match.group(3)
        package = site / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f'VERSION = "{version}"\n')
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {match.group(1)}\nVersion: {version}\n")
        (info / "WHEEL").write_text("Wheel-Version: 1.0\nTag: py3-none-any\n")
        files = [f"{name}/__init__.py", *(f"{info.name}/{part}" for part in ("METADATA", "WHEEL", "RECORD"))]
        (info / "RECORD").write_text("".join(f"{path},,\n" for path in files))


def stand_in_build(folder: Path, requirements: Path = build_layer.REQUIREMENTS) -> dict[str, Any]:
    """Build ``folder/layer`` and ``folder/layer-manifest.json`` as ``make layer`` would, from stand-in wheels."""
    with mock.patch.object(build_layer, "_pip", stand_in_pip):
        return build_layer.build(requirements, folder / "layer", folder / "layer-manifest.json")
