"""Import each function's modules of the code asset against exactly its layers on CPython 3.14, without the dev venv.

The functions run CPython 3.14 on arm64. No arm64 3.14 interpreter can be installed here (only PyPI, npm and Debian
are reachable, and none ships one); Pyodide, CPython 3.14 compiled to WebAssembly, comes from npm (pinned in
package.json). Each function attaches only the layers of what its handler imports (``infra.dependencies``), so the
check runs once per distinct set of layers, for the functions that attach it, and:

* imports every module those functions' handlers can reach (``infra.dependencies.reachable``: the handler itself
  included; the files ``infra.asset`` declares, the ones ``Code.from_asset`` packages, staged in a scratch folder)
  with ``sys.path`` = the code asset, then those layers' own files in the order the function attaches them, as the
  Lambda runtime orders them, under CPython 3.14: every pure-Python package a layer ships (Powertools, pydantic,
  slack_sdk, PyYAML's Python half, ...) is the very file the layer deploys, and a module needing a library of
  another function's layer fails here;
* puts after the layers what the Lambda runtime itself provides (boto3, botocore, s3transfer, which no layer carries),
  at the versions requirements.txt pins, as the runtime's own copy stands after the layers;
* substitutes, for a compiled distribution in those layers whose arm64 shared objects no wasm interpreter can load,
  the same distribution at the same version built for CPython 3.14 wasm from PyPI, when PyPI has one (pydantic-core
  does);
* reports the modules that need a compiled distribution of those layers PyPI has no such build of (numpy, matplotlib
  and their kin, imported only by the report's charts): for those the layer's wheel tags and ELF headers are what is
  checked (``infra.build_layer.verify`` at build time), not an import. The same failure for a library the function's
  layers do not hold is a failure;
* checks docs/deploy.md's size tables against the build's measurement (``python -m infra.build_layer --table``).

    python -m governor_cli.testing.layer_import   (make layer-import-check; needs make layer and npm ci)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from governor.registry import REGISTRY
from infra.asset import asset_files
from infra.build_layer import (
    CODE_ROW,
    LAYER_DIR,
    MANIFEST,
    code_asset_bytes,
    distributions,
    fingerprint,
    size_table,
)
from infra.dependencies import reachable, shipped_plan
from infra.layer_manifest import MB, function_sizes, read, stale
from infra.settings import LAMBDAS_DIR

ROOT = Path(__file__).resolve().parents[3]
#: Compiled distributions in the layers that have a CPython 3.14 wasm build on PyPI, substituted for the import check.
WASM_ON_PYPI = ("pydantic_core",)
#: Third-party packages whose compiled parts have no wasm build on PyPI: modules needing them are checked by tag.
TAG_CHECKED = ("numpy", "matplotlib", "contourpy", "kiwisolver", "PIL", "fontTools")
#: Third-party packages whose import each run reports (those its layers hold).
PROBED = (
    "aws_lambda_powertools",
    "pydantic",
    "pydantic_core",
    "yaml",
    "slack_sdk",
    "aws_xray_sdk",
    "numpy",
    "matplotlib",
)
DOC = ROOT / "docs" / "deploy.md"
#: The marker before docs/deploy.md's size tables (``python -m infra.build_layer --table`` prints them).
SIZES_MARKER = "<!-- layer-sizes -->"


def _substitutes(sites: list[Path], into: Path) -> dict[str, Path]:
    """Each wasm substitute in its own folder, for the distributions the ``sites`` hold: distribution -> folder."""
    installed = {d.name: d.version for site in sites for d in distributions(site)}
    done: dict[str, Path] = {}
    for name in WASM_ON_PYPI:
        if name not in installed:
            continue
        version = installed[name]
        folder, wheels = into / name, into / "wheels"
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        command += ["--platform", "pyemscripten_2026_0_wasm32", "--python-version", "3.14", "--implementation", "cp"]
        subprocess.run([*command, "-d", str(wheels), f"{name.replace('_', '-')}=={version}"], check=True)
        (wheel,) = wheels.glob(f"{name}-{version}-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(folder)
        shutil.rmtree(wheels, ignore_errors=True)
        done[f"{name}=={version} ({wheel.name})"] = folder
    return done


def _runtime_provided(into: Path) -> list[str]:
    """boto3 and botocore at the pins of requirements.txt (s3transfer as boto3 requires it): the runtime's set."""
    pins = [
        line.split("#", 1)[0].strip()
        for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
        if line.startswith(("boto3==", "botocore=="))
    ]
    command = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    command += ["--only-binary=:all:", "--python-version", "3.14", "--implementation", "cp", "--target", str(into)]
    subprocess.run([*command, *pins], check=True)
    return pins


def _stage_asset(into: Path) -> int:
    """A copy of the code asset (only what ``Code.from_asset`` ships); returns its file count."""
    files = asset_files()
    for source in files:
        target = into / source.relative_to(LAMBDAS_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return len(files)


def _run(work: Path, layers: tuple[str, ...], functions: list[str], root: Path) -> dict[str, Any]:
    """One Pyodide run: the modules ``functions`` reach, against exactly ``layers`` (their shared set)."""
    sites = [root / name / "python" for name in layers]
    substitutes = _substitutes(sites, work / "substitutes" / "-".join(layers))
    modules = sorted(set().union(*(reachable(REGISTRY[name]) for name in functions)))
    job = {
        "substitutes": [str(folder) for folder in substitutes.values()],
        "asset": str(work / "asset"),
        "layers": [str(site) for site in sites],
        "runtime": str(work / "runtime"),
        "modules": modules,
        "probe": [name for name in PROBED if any((site / name).exists() for site in sites)],
    }
    (work / "job.json").write_text(json.dumps(job))
    out = work / "outcome.json"
    subprocess.run(
        ["node", str(Path(__file__).with_name("import_on_314.mjs")), str(work / "job.json"), str(out)],
        check=True,
        cwd=ROOT,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "NODE_PATH": str(ROOT / "node_modules")},
    )
    outcome: dict[str, Any] = json.loads(out.read_text())
    outcome["substituted"] = list(substitutes)
    outcome["tag_checkable"] = [name for name in TAG_CHECKED if any((site / name).exists() for site in sites)]
    return outcome


def _report(layers: tuple[str, ...], functions: list[str], outcome: dict[str, Any]) -> tuple[int, int]:
    """Print one run; returns (passed, failed)."""
    modules: dict[str, str] = outcome["modules"]
    held = outcome["tag_checkable"]
    tag_checked = {m: e for m, e in modules.items() if e != "ok" and any(f"'{t}" in e for t in held)}
    failed = {m: e for m, e in modules.items() if e != "ok" and m not in tag_checked}
    handlers = [REGISTRY[name].module for name in functions]
    print(
        f"{', '.join(functions)} on layers {' + '.join(layers)}: CPython {outcome['python']} ({outcome['platform']}), "
        f"{len(modules)} modules they reach, handlers imported {sum(modules.get(h) == 'ok' for h in handlers)} of "
        f"{len(handlers)}"
    )
    if outcome["substituted"]:
        print(f"  substituted (same version, CPython 3.14 wasm from PyPI): {', '.join(outcome['substituted'])}")
    for name, state in outcome["third_party"].items():
        print(f"  {name}: {state}")
    for name, error in sorted(tag_checked.items()):
        print(f"  tag-checked only (no wasm build on PyPI): {name}: {error}")
    for name, error in sorted(failed.items()):
        print(f"  FAILED {name}: {error}")
    # a handler must import for real: tag-checked is not enough for a function's entry point
    return len(modules) - len(failed) - len(tag_checked), len(failed) + sum(h in tag_checked for h in handlers)


def documented_sizes(record: dict[str, Any], doc: Path = DOC) -> list[str]:
    """How docs/deploy.md's size tables differ from the build's: layer rows exactly, each function's layers exactly
    and its size (and the code asset's) within 1 MB: the code asset changes with every commit, the layers only with a
    pin."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    if SIZES_MARKER not in [line.strip() for line in lines]:
        return [f"{doc.name} has no {SIZES_MARKER} tables"]
    start = [line.strip() for line in lines].index(SIZES_MARKER) + 1
    written = [line.strip() for line in lines[start : start + len(size_table(record)) + 1] if line.strip()]
    measured = [line for line in size_table(record) if line]
    problems = []
    for wrote, built in zip(written, measured, strict=False):
        if wrote == built:
            continue
        wrote_cells, built_cells = wrote.split("|")[1:-1], built.split("|")[1:-1]
        close = (
            len(wrote_cells) == len(built_cells) == 3
            and wrote_cells[:2] == built_cells[:2]
            and built_cells[0].strip() in {*shipped_plan().functions, CODE_ROW}
            and abs(_mb(wrote_cells[2]) - _mb(built_cells[2])) <= 1.0
        )
        if not close:
            problems.append(f"{doc.name} says {wrote!r}, the build measured {built!r}")
    if len(written) < len(measured):
        problems.append(f"{doc.name} lacks rows the build measured: {measured[len(written) :]}")
    return problems


def _mb(cell: str) -> float:
    try:
        return float(cell.strip().removesuffix(" MB"))
    except ValueError:
        return float("nan")


def check(layer: Path = LAYER_DIR, manifest: Path = MANIFEST) -> int:
    problem = stale(layer, manifest, fingerprint())
    if problem:
        print(f"no current build in {layer} ({problem}): run make layer first", file=sys.stderr)
        return 2
    record = read(manifest) or {}
    plan = shipped_plan()
    runs: dict[tuple[str, ...], list[str]] = {}
    for name, layers in plan.functions.items():
        runs.setdefault(layers, []).append(name)
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="layer-import-") as scratch:
        work = Path(scratch)
        shipped = _stage_asset(work / "asset")
        provided = _runtime_provided(work / "runtime")
        print(f"code asset: {shipped} files, as infra.asset ships them; after the layers, as the Lambda runtime "
              f"provides them: {', '.join(provided)}")  # fmt: skip
        for layers, functions in sorted(runs.items()):
            ok, bad = _report(layers, functions, _run(work, layers, functions, layer))
            passed, failed = passed + ok, failed + bad
    sizes = function_sizes(record, code_asset_bytes())
    print("code + layers, unzipped: " + ", ".join(f"{name} {b / MB:.1f} MB" for name, b in sizes.items()))
    for problem in documented_sizes(record):
        print(f"FAILED sizes: {problem} (python -m infra.build_layer --table prints them)")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(check())
