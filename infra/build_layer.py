"""Build the Lambda dependency layer for the functions' real runtime without Docker, and fail closed.

The functions run on CPython 3.14, arm64 (``infra.constructs.function``), whose glibc is 2.34. pip is asked for
wheels only (``--only-binary=:all:``) for that interpreter and every manylinux tag glibc 2.34 supports
(``manylinux_2_17`` .. ``manylinux_2_34``, ``manylinux2014`` being 2_17): for cp314 matplotlib, numpy, contourpy and
kiwisolver publish only ``manylinux_2_27/2_28`` aarch64 wheels, so ``manylinux2014`` alone finds nothing.

``aws-lambda-powertools[tracer]`` pulls in ``aws-xray-sdk``, which pulls in ``botocore`` but not ``boto3``. Layer
paths come before the runtime's own packages, so shipping that botocore would make the runtime's boto3 run on a
botocore it was not released with. The Python runtime provides boto3, botocore and s3transfer as a matched set;
the layer keeps none of them (AWS's Powertools layer does the same).

The build goes to a scratch folder and replaces ``build/layer`` only once it is complete and verified: every pinned
requirement installed, every wheel's tag one the runtime loads, every shared object built for aarch64, within
Lambda's size limit. A failed build removes ``build/layer`` and its manifest, so nothing stale or empty is ever
deployed; ``infra.constructs.layer`` refuses to synthesize without a manifest that matches today's requirements.
An unchanged build (same requirements, same targets) is kept, so each ``cdk`` command does not rebuild it.

Run through ``make layer`` (cdk.json's ``build`` hook): ``python3 -m infra.build_layer``.
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

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "lambdas" / "requirements.txt"
LAYER_DIR = ROOT / "build" / "layer"
#: Beside the layer, not in it: what was built, from what, for which runtime (read at synth).
MANIFEST = ROOT / "build" / "layer-manifest.json"

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
#: Distributions the Lambda Python runtime ships as a matched set; the layer must not shadow one of them.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
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


def fingerprint(requirements: Path) -> str:
    """What a build depends on: the requirements' text and the runtime targets."""
    digest = hashlib.sha256(requirements.read_bytes())
    digest.update(json.dumps([PYTHON_VERSION, PLATFORMS, RUNTIME_PROVIDED]).encode())
    return digest.hexdigest()


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


def build(requirements: Path = REQUIREMENTS, out: Path = LAYER_DIR, manifest: Path = MANIFEST) -> dict[str, object]:
    """Build ``out/python`` from ``requirements`` for the runtime, verify it, and write ``manifest``.

    Anything short of a verified build leaves neither ``out`` nor ``manifest`` behind.
    """
    pins = pinned(requirements)
    scratch = out.with_name(out.name + ".partial")
    _clear(out, manifest)
    shutil.rmtree(scratch, ignore_errors=True)
    site = scratch / "python"
    site.mkdir(parents=True)
    try:
        _pip(site, requirements)
        removed = prune(site)
        for cache in list(site.rglob("__pycache__")):
            shutil.rmtree(cache, ignore_errors=True)
        found = verify(site, pins)
        unzipped = size(scratch)
        if unzipped >= LAMBDA_UNZIPPED_LIMIT:
            raise LayerBuildError(f"the layer is {unzipped:,} bytes unzipped; Lambda allows {LAMBDA_UNZIPPED_LIMIT:,}")
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    scratch.rename(out)
    record: dict[str, object] = {
        "fingerprint": fingerprint(requirements),
        "requirements": requirements.name,
        "python": ".".join(map(str, PYTHON_VERSION)),
        "platforms": list(PLATFORMS),
        "removed": removed,
        "unzipped_bytes": unzipped,
        "distributions": {d.name: {"version": d.version, "tags": list(d.tags)} for d in found},
    }
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return record


def current(requirements: Path = REQUIREMENTS, out: Path = LAYER_DIR, manifest: Path = MANIFEST) -> bool:
    """Whether ``out`` is a verified build of today's ``requirements`` (then ``make layer`` keeps it)."""
    if not (manifest.is_file() and (out / "python").is_dir()):
        return False
    try:
        record = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("fingerprint") == fingerprint(requirements)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requirements", type=Path, default=REQUIREMENTS)
    parser.add_argument("--out", type=Path, default=LAYER_DIR)
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--force", action="store_true", help="rebuild even when the build is current")
    args = parser.parse_args(argv)
    if not args.force and current(args.requirements, args.out, args.manifest):
        print(f"layer in {args.out} is current for {args.requirements.name} (make layer-clean to rebuild)")
        return 0
    try:
        record = build(args.requirements, args.out, args.manifest)
    except (LayerBuildError, OSError) as error:
        print(f"layer not built: {error}", file=sys.stderr)
        return 1
    removed = ", ".join(record["removed"]) or "nothing to remove"  # type: ignore[arg-type]
    print(
        f"layer built in {args.out} for CPython {record['python']} arm64: "
        f"{len(record['distributions'])} distributions, {record['unzipped_bytes']:,} bytes unzipped; "  # type: ignore[arg-type]
        f"left to the Lambda runtime: {removed}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
