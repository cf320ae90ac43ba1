"""Import every module of the code asset against the built layer on CPython 3.14, without the dev venv.

The functions run CPython 3.14 on arm64. No arm64 3.14 interpreter can be installed here (only PyPI, npm and Debian
are reachable, and none ships one); Pyodide, CPython 3.14 compiled to WebAssembly, comes from npm (pinned in
package.json). The check therefore:

* imports every ``governor`` module of the code asset (handlers included; the files ``infra.asset`` declares, the
  ones ``Code.from_asset`` packages, staged in a scratch folder) with ``sys.path`` = the code asset, then the layer's
  own files, as the Lambda runtime orders them, under CPython 3.14: every pure-Python package the layer ships
  (Powertools, pydantic, slack_sdk, PyYAML's Python half, ...) is the very file the layer deploys;
* puts after the layer what the Lambda runtime itself provides (boto3, botocore, s3transfer, which the layer
  deliberately leaves out), at the versions requirements.txt pins, as the runtime's own copy stands after the layers;
* substitutes, for a compiled distribution whose arm64 shared objects no wasm interpreter can load, the same
  distribution at the same version built for CPython 3.14 wasm from PyPI, when PyPI has one (pydantic-core does);
* reports the modules that need a compiled distribution PyPI has no such build of (numpy, matplotlib and their
  kin, imported only by the report's charts): for those the layer's wheel tags and ELF headers are what is checked
  (``infra.build_layer.verify`` at build time), not an import.

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

from infra.asset import asset_files
from infra.build_layer import LAYER_DIR, distributions
from infra.settings import LAMBDAS_DIR

ROOT = Path(__file__).resolve().parents[3]
#: Compiled distributions in the layer that have a CPython 3.14 wasm build on PyPI, substituted for the import check.
WASM_ON_PYPI = ("pydantic_core",)
#: Third-party packages whose compiled parts have no wasm build on PyPI: modules needing them are checked by tag.
TAG_CHECKED = ("numpy", "matplotlib", "contourpy", "kiwisolver", "PIL", "fontTools")


def _substitutes(site: Path, into: Path) -> list[str]:
    into.mkdir(parents=True, exist_ok=True)
    installed = {d.name: d.version for d in distributions(site)}
    done: list[str] = []
    for name in WASM_ON_PYPI:
        version = installed[name]
        wheels = into / "wheels"
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        command += ["--platform", "pyemscripten_2026_0_wasm32", "--python-version", "3.14", "--implementation", "cp"]
        subprocess.run([*command, "-d", str(wheels), f"{name.replace('_', '-')}=={version}"], check=True)
        (wheel,) = wheels.glob(f"{name}-{version}-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(into)
        done.append(f"{name}=={version} ({wheel.name})")
    shutil.rmtree(into / "wheels", ignore_errors=True)
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


def check(layer: Path = LAYER_DIR) -> int:
    site = layer / "python"
    if not site.is_dir():
        print(f"no layer in {layer}: run make layer first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="layer-import-") as scratch:
        work = Path(scratch)
        shipped = _stage_asset(work / "asset")
        substituted = _substitutes(site, work / "substitutes")
        provided = _runtime_provided(work / "runtime")
        out = work / "outcome.json"
        script = Path(__file__).with_name("import_on_314.mjs")
        node_path = str(ROOT / "node_modules")
        subprocess.run(
            [
                "node",
                str(script),
                str(work / "asset"),
                str(site),
                str(work / "substitutes"),
                str(work / "runtime"),
                str(out),
            ],
            check=True,
            cwd=ROOT,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "NODE_PATH": node_path},
        )
        outcome = json.loads(out.read_text())
    modules: dict[str, str] = outcome["modules"]
    tag_checked = {m: e for m, e in modules.items() if e != "ok" and any(f"'{t}" in e for t in TAG_CHECKED)}
    failed = {m: e for m, e in modules.items() if e != "ok" and m not in tag_checked}
    handlers = [m for m in modules if m.endswith(".handler")]
    print(
        f"CPython {outcome['python']} ({outcome['platform']}): {len(modules)} modules of the code asset "
        f"({shipped} files, as infra.asset ships them)"
    )
    print(f"substituted (same version, CPython 3.14 wasm from PyPI): {', '.join(substituted)}")
    print(f"after the layer, as the Lambda runtime provides them: {', '.join(provided)}")
    print(f"handlers imported: {sum(modules[m] == 'ok' for m in handlers)} of {len(handlers)}")
    for name, state in outcome["third_party"].items():
        print(f"  {name}: {state}")
    for name, error in sorted(tag_checked.items()):
        print(f"tag-checked only (no wasm build on PyPI): {name}: {error}")
    for name, error in sorted(failed.items()):
        print(f"FAILED {name}: {error}")
    ok = len(modules) - len(failed) - len(tag_checked)
    print(f"{ok} passed, {len(failed)} failed")
    return 1 if failed or any(modules[m] != "ok" for m in handlers) else 0


if __name__ == "__main__":
    raise SystemExit(check())
