"""Build the Lambda dependency layers for the functions' real runtime without Docker, and fail closed.

The functions run on CPython 3.14, arm64 (``infra.constructs.function``), whose glibc is 2.34. pip is asked for
wheels only (``--only-binary=:all:``) for that interpreter and every manylinux tag glibc 2.34 supports
(``manylinux_2_17`` .. ``manylinux_2_34``, ``manylinux2014`` being 2_17): for cp314 matplotlib, numpy, contourpy and
kiwisolver publish only ``manylinux_2_27/2_28`` aarch64 wheels, so ``manylinux2014`` alone finds nothing.

Each function ships only what its handler imports (``infra.dependencies``: the layer plan, derived from the import
graph): pip installs ``lambdas/requirements.txt`` once (one resolution and one download for every layer), the
install is verified, then split into one folder per layer (``infra.layer_split``): ``build/layer/<layer>/python``.
The report's chart libraries are in the report's layer only; the Spot function, whose cold start is spent inside a
two-minute warning, gets the base layer, and the synth holds it to its construct's ``UNZIPPED_BUDGET``.

``aws-lambda-powertools[tracer]`` pulls in ``aws-xray-sdk``, which pulls in ``botocore`` but not ``boto3``. Layer
paths come before the runtime's own packages, so shipping that botocore would make the runtime's boto3 run on a
botocore it was not released with. The Python runtime provides boto3, botocore and s3transfer as a matched set;
no layer keeps one of them (AWS's Powertools layer does the same), nor what only they need.

The build goes to a scratch folder and replaces ``build/layer`` only once it is complete and verified: every pinned
requirement installed, every wheel's tag one the runtime loads, every shared object built for aarch64, every file
owned by a distribution, every function within Lambda's size limit. A failed build removes ``build/layer`` and its
manifest, so nothing stale or empty is ever deployed. The manifest records the SHA-256 of every built file
(``infra.layer_manifest``): ``infra.constructs.layer`` refuses to synthesize unless it matches today's requirements
and plan and every file in ``build/layer`` is one the build wrote, unchanged. A current build is kept, so each
``cdk`` command does not rebuild it; anything else is rebuilt.

Run through ``make layer`` (cdk.json's ``build`` hook): ``python3 -m infra.build_layer`` (``--table`` prints the
measured sizes as docs/deploy.md shows them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.asset import asset_files
from infra.dependencies import (
    REQUIREMENTS,
    RUNTIME_PROVIDED,
    DependencyError,
    LayerPlan,
    layer_plan,
    requirement_lines,
    shipped_plan,
)
from infra.layer_manifest import file_hashes, function_sizes, megabytes, read, stale
from infra.layer_split import SplitError, split
from infra.settings import BUILD_DIR

LAYER_DIR = BUILD_DIR / "layer"
#: Beside the layers, not in them: what was built, from what, for which runtime, every file's hash (read at synth).
MANIFEST = BUILD_DIR / "layer-manifest.json"

#: The functions' runtime: ``lambda_.Runtime.PYTHON_3_14`` on ``Architecture.ARM_64`` (Amazon Linux 2023, glibc 2.34).
PYTHON_VERSION = (3, 14)
ARCHITECTURE = "aarch64"
GLIBC = (2, 34)
#: Every manylinux tag the runtime's glibc accepts; pip treats each ``--platform`` as one more it may pick from.
PLATFORMS = (
    *(f"manylinux_2_{minor}_{ARCHITECTURE}" for minor in range(GLIBC[1], 16, -1)),
    f"manylinux2014_{ARCHITECTURE}",
)
#: Lambda's limit on a function's code plus all its layers, unzipped (the "250 MB" quota, in bytes).
LAMBDA_UNZIPPED_LIMIT = 262_144_000
#: ELF ``e_machine`` of aarch64.
_EM_AARCH64 = 183


class LayerBuildError(RuntimeError):
    """The layer could not be built for the runtime; the message says which requirement or file and why."""


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def pinned(requirements: Path) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line (extras dropped); anything unpinned is refused."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(requirements.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([A-Za-z0-9.+!-]+)", line)
        if match is None:
            raise LayerBuildError(f"{requirements.name}:{number}: {line!r} is not pinned as name==version")
        pins[_normalized(match.group(1))] = match.group(3)
    return pins


def fingerprint(requirements: Path = REQUIREMENTS, plan: LayerPlan | None = None) -> str:
    """What a build depends on: the requirements' text, the runtime targets and the layer plan (which function needs
    which requirement: a handler importing something new needs another build). The plan is the handlers' unless
    given."""
    plan = _plan(requirements, plan)
    digest = hashlib.sha256(requirements.read_bytes())
    digest.update(json.dumps([PYTHON_VERSION, PLATFORMS, RUNTIME_PROVIDED]).encode())
    digest.update(plan.fingerprint().encode())
    return digest.hexdigest()


def _plan(requirements: Path, plan: LayerPlan | None) -> LayerPlan:
    if plan is not None:
        return plan
    return shipped_plan() if requirements == REQUIREMENTS else layer_plan(requirements)


def code_asset_bytes() -> int:
    """Unzipped bytes of the code asset every function ships (the files ``Code.from_asset`` packages)."""
    return sum(path.stat().st_size for path in asset_files())


def prune(site: Path, names: tuple[str, ...] = RUNTIME_PROVIDED) -> list[str]:
    """Remove the packages and ``.dist-info`` folders of ``names`` from ``site``; returns what was removed."""
    wanted = {_normalized(name) for name in names}
    removed: list[str] = []
    for entry in sorted(site.iterdir()):
        stem = entry.name
        if stem.endswith(".dist-info"):
            stem = stem[: -len(".dist-info")].rsplit("-", 1)[0]
        if _normalized(stem) in wanted:
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry.name)
    return removed


@dataclass(frozen=True)
class Distribution:
    name: str
    version: str
    tags: tuple[str, ...]


def distributions(site: Path) -> list[Distribution]:
    """The installed distributions with the wheel tags their ``WHEEL`` file records."""
    found: list[Distribution] = []
    for info in sorted(site.glob("*.dist-info")):
        name, version = info.name[: -len(".dist-info")].rsplit("-", 1)
        wheel = info / "WHEEL"
        tags = tuple(
            line.split(":", 1)[1].strip()
            for line in (wheel.read_text(encoding="utf-8").splitlines() if wheel.is_file() else [])
            if line.startswith("Tag:")
        )
        found.append(Distribution(_normalized(name), version, tags))
    return found


def tag_loads(tag: str) -> bool:
    """Whether the runtime (cp314, aarch64, glibc 2.34) loads a wheel tagged ``tag`` (``python-abi-platform``)."""
    python, abi, platform = tag.split("-")
    major, minor = PYTHON_VERSION
    own = f"cp{major}{minor}"

    def minor_of(python_tag: str) -> int | None:
        match = re.fullmatch(rf"(?:cp|py){major}(\d*)", python_tag)
        return int(match.group(1) or 0) if match else None

    versions = [minor_of(p) for p in python.split(".")]
    if abi == own:
        ok_python = own in python.split(".")
    elif abi in ("abi3", "none"):
        ok_python = any(v is not None and v <= minor for v in versions)
    else:
        ok_python = False
    if platform == "any":
        return ok_python and abi == "none"
    return ok_python and bool(set(platform.split(".")) & set(PLATFORMS))


def foreign_objects(site: Path) -> list[str]:
    """Shared objects in ``site`` that are not aarch64 ELF files (the runtime could not load them)."""
    wrong: list[str] = []
    for path in sorted(site.rglob("*.so*")):
        if not path.is_file():
            continue
        head = path.read_bytes()[:20]
        if head[:4] != b"\x7fELF" or int.from_bytes(head[18:20], "little") != _EM_AARCH64:
            wrong.append(path.relative_to(site).as_posix())
    return wrong


def size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def verify(site: Path, pins: dict[str, str]) -> list[Distribution]:
    """Raise ``LayerBuildError`` unless ``site`` holds every pin at its version, loadable by the runtime."""
    found = distributions(site)
    if not found:
        raise LayerBuildError(f"{site} holds no distribution: the build is empty")
    installed = {d.name: d for d in found}
    for name, version in pins.items():
        if name not in installed:
            raise LayerBuildError(f"{name}=={version} is missing from the layer")
        if installed[name].version != version:
            raise LayerBuildError(f"{name} is {installed[name].version} in the layer, pinned {version}")
    for dist in found:
        if not dist.tags or not any(tag_loads(tag) for tag in dist.tags):
            tags = list(dist.tags)
            raise LayerBuildError(f"{dist.name} {dist.version}: wheel tags {tags} do not load on cp314 arm64")
    wrong = foreign_objects(site)
    if wrong:
        raise LayerBuildError(f"not built for aarch64: {wrong[0]} (and {len(wrong) - 1} more)")
    return found


def _pip(site: Path, requirements: Path) -> None:
    major, minor = PYTHON_VERSION
    command = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    command += ["--implementation", "cp", "--python-version", f"{major}.{minor}", "--abi", f"cp{major}{minor}"]
    command += ["--abi", "abi3", "--abi", "none"]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += ["--only-binary=:all:", "--target", str(site), "-r", str(requirements)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or done.stderr.splitlines()
        raise LayerBuildError(f"pip found no wheels for the runtime: {(errors or ['no output'])[-1]}")


def _clear(out: Path, manifest: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    manifest.unlink(missing_ok=True)


def size_problem(name: str, unzipped: int, budget: tuple[int, str] | None = None) -> str | None:
    """Why function ``name`` cannot ship ``unzipped`` bytes of code and layers: Lambda's limit, or its own ``budget``
    (bytes, why: its construct's ``UNZIPPED_BUDGET``, checked at synth)."""
    if unzipped >= LAMBDA_UNZIPPED_LIMIT:
        return (
            f"the {name} function's code and layers are {unzipped:,} bytes unzipped; Lambda allows "
            f"{LAMBDA_UNZIPPED_LIMIT:,}"
        )
    if budget is not None and unzipped > budget[0]:
        limit, why = budget
        return (
            f"the {name} function's code and layers are {megabytes(unzipped)} unzipped, over its budget of "
            f"{megabytes(limit)}: {why}"
        )
    return None


def _record(
    requirements: Path, plan: LayerPlan, scratch: Path, held: dict[str, list[str]], found: list[Distribution]
) -> dict[str, object]:
    """The manifest of a split, verified build in ``scratch`` (one folder per layer)."""
    by_name = {d.name: d for d in found}
    code = code_asset_bytes()
    layers: dict[str, dict[str, object]] = {}
    for layer in plan.layers:
        folder = scratch / layer.name
        layers[layer.name] = {
            "requirements": list(layer.requirements),
            "functions": list(layer.functions),
            "distributions": {
                name: {"version": by_name[_normalized(name)].version, "tags": list(by_name[_normalized(name)].tags)}
                for name in held[layer.name]
            },
            "unzipped_bytes": size(folder),
            "files": file_hashes(folder),
        }
    functions = {
        name: code + sum(int(layers[layer]["unzipped_bytes"]) for layer in names)  # type: ignore[call-overload]
        for name, names in plan.functions.items()
    }
    for name, unzipped in sorted(functions.items()):
        problem = size_problem(name, unzipped)
        if problem:
            raise LayerBuildError(problem)
    return {
        "fingerprint": fingerprint(requirements, plan),
        "requirements": requirements.name,
        "python": ".".join(map(str, PYTHON_VERSION)),
        "platforms": list(PLATFORMS),
        "code_bytes": code,
        "unused": held[""],
        "layers": layers,
        "functions": {
            name: {"layers": list(plan.functions[name]), "unzipped_bytes": functions[name]} for name in functions
        },
    }


def build(
    requirements: Path = REQUIREMENTS, out: Path = LAYER_DIR, manifest: Path = MANIFEST, plan: LayerPlan | None = None
) -> dict[str, object]:
    """Install ``requirements`` once for the runtime, verify the install, split it into the plan's layers
    (``out/<layer>/python``) and write ``manifest``; the plan is the handlers' (``infra.dependencies``) unless given.

    Anything short of a verified build leaves neither ``out`` nor ``manifest`` behind.
    """
    pins = pinned(requirements)
    scratch = out.with_name(out.name + ".partial")
    _clear(out, manifest)
    shutil.rmtree(scratch, ignore_errors=True)
    site = scratch / ".install" / "python"
    site.mkdir(parents=True)
    try:
        _pip(site, requirements)
        removed = prune(site) + _prune_tooling(site)
        for cache in list(site.rglob("__pycache__")):
            shutil.rmtree(cache, ignore_errors=True)
        found = verify(site, pins)
        plan = _plan(requirements, plan)
        held = split(site, scratch, plan, requirement_lines(requirements))
        shutil.rmtree(scratch / ".install")
        record = _record(requirements, plan, scratch, held, found)
    except (DependencyError, SplitError) as error:
        shutil.rmtree(scratch, ignore_errors=True)
        raise LayerBuildError(str(error)) from error
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    scratch.rename(out)
    record["removed"] = removed
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return record


def _prune_tooling(site: Path) -> list[str]:
    """Console scripts and man pages (``bin/``, ``share/``): no function runs them, and each script's first line names
    the build machine's interpreter."""
    removed = []
    for name in ("bin", "share"):
        if (site / name).is_dir():
            shutil.rmtree(site / name)
            removed.append(f"{name}/")
    return removed


def current(
    requirements: Path = REQUIREMENTS, out: Path = LAYER_DIR, manifest: Path = MANIFEST, plan: LayerPlan | None = None
) -> bool:
    """Whether ``out`` is the verified build of today's ``requirements`` and plan, every file as built (then ``make
    layer`` keeps it)."""
    return stale(out, manifest, fingerprint(requirements, plan)) is None


def built_sizes(out: Path = LAYER_DIR, manifest: Path = MANIFEST) -> dict[str, int] | None:
    """Each function's code plus layers, unzipped, as the current build measured its layers (with today's code
    asset); None without a current build."""
    if stale(out, manifest, fingerprint()) is not None:
        return None
    return function_sizes(read(manifest) or {}, code_asset_bytes())


#: The size tables' row for the code asset (beside one row per function and one per layer).
CODE_ROW = "(code asset, every function)"


def size_table(record: dict[str, Any]) -> list[str]:
    """The build's measured sizes as docs/deploy.md shows them: one row per function (today's code asset plus its
    layers, unzipped), then one per layer."""
    code = code_asset_bytes()
    layers = record["layers"]
    rows = ["| function | layers | code + layers, unzipped |", "|---|---|---|"]
    for name, size_ in function_sizes(record, code).items():
        rows.append(f"| {name} | {', '.join(record['functions'][name]['layers'])} | {megabytes(size_)} |")
    rows += ["", "| layer | requirements | unzipped |", "|---|---|---|"]
    for name, layer in layers.items():
        rows.append(f"| {name} | {', '.join(layer['requirements'])} | {megabytes(int(layer['unzipped_bytes']))} |")
    rows.append(f"| {CODE_ROW} | lambdas/governor | {megabytes(code)} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requirements", type=Path, default=REQUIREMENTS)
    parser.add_argument("--out", type=Path, default=LAYER_DIR)
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--force", action="store_true", help="rebuild even when the build is current")
    parser.add_argument("--table", action="store_true", help="print the sizes as docs/deploy.md's tables")
    args = parser.parse_args(argv)
    try:
        problem = None if args.force else stale(args.out, args.manifest, fingerprint(args.requirements))
        if args.force or problem:
            if problem and args.out.exists():
                print(f"rebuilding {args.out}: {problem}", file=sys.stderr)
            build(args.requirements, args.out, args.manifest)
        else:
            print(
                f"layers in {args.out} are current for {args.requirements.name} (make layer-clean to rebuild)",
                file=sys.stderr if args.table else sys.stdout,
            )
    except (LayerBuildError, DependencyError, OSError) as error:
        print(f"layers not built: {error}", file=sys.stderr)
        return 1
    record = read(args.manifest) or {}
    if args.table:
        print("\n".join(size_table(record)))
        return 0
    print(
        f"layers in {args.out} for CPython {record['python']} arm64: "
        + "; ".join(
            f"{name} {megabytes(int(layer['unzipped_bytes']))} ({len(layer['distributions'])} distributions)"
            for name, layer in record["layers"].items()
        )
        + f"; removed: {', '.join(record.get('removed', [])) or 'nothing'}"
        + f"; needed by no function: {', '.join(record.get('unused', [])) or 'nothing'}"
    )
    sizes = function_sizes(record, code_asset_bytes())
    print("code + layers, unzipped: " + ", ".join(f"{name} {megabytes(b)}" for name, b in sizes.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
