"""The Lambda runtime stands alone: importing every module of ``governor`` loads neither the operator tooling
(``governor_cli``), nor the CDK app (``infra``), nor the test-only emulator and clock (``moto``, ``time_machine``),
and no runtime module names them in an import, even inside a function."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

RUNTIME = ROOT / "lambdas" / "governor"
FOREIGN = ("governor_cli", "infra", "moto", "time_machine")
#: The modules of a capability package that decide without AWS.
PURE = ("domain", "events", "rules", "explain")

WALK = """
import importlib, json, pkgutil, sys
import governor

def fail(name):
    raise SystemExit(f"cannot import {name}")

names = ["governor", *(m.name for m in pkgutil.walk_packages(governor.__path__, "governor.", onerror=fail))]
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "loaded": sorted(sys.modules)}))
"""


def _foreign(name: str) -> bool:
    return any(name == top or name.startswith(f"{top}.") for top in FOREIGN)


def test_importing_every_runtime_module_loads_no_cli_infra_or_test_tooling() -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GOVERNOR_", "POWERTOOLS_"))}
    done = subprocess.run(
        [sys.executable, "-c", WALK],
        capture_output=True,
        text=True,
        check=False,
        cwd=RUNTIME.parent,  # not the repository root: infra/ and cli/ are not beside the script
        env={**environ, "PYTHONPATH": str(ROOT / "lambdas")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert {"governor.policy", "governor.idle.handler", "governor.adapters.ec2", "governor.audit.engine"} <= set(
        result["imported"]
    )
    assert len(result["imported"]) == len(list(RUNTIME.rglob("*.py"))), "every module under lambdas/governor imported"
    assert [name for name in result["loaded"] if _foreign(name)] == []


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``path``, inside functions too."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append((node.lineno, node.module or ""))
    return found


def test_no_runtime_module_imports_cli_infra_or_test_tooling() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for path in sorted(RUNTIME.rglob("*.py"))
        for line, name in _imports(path)
        if _foreign(name)
    ]
    assert offenders == []


def test_decisions_are_pure_in_every_capability_package() -> None:
    """A capability's ``domain`` module (and its ``events``, ``rules`` and ``explain`` where it has them, and the
    shared ``domain`` package) decides without AWS: no boto3 or botocore import and no shared adapter, even inside a
    function."""
    pure = [path for name in PURE for path in sorted(RUNTIME.glob(f"*/{name}.py"))]
    pure += sorted((RUNTIME / "domain").glob("*.py"))
    assert {path.parent.name for path in RUNTIME.glob("*/domain.py")} >= {"network", "keys", "idle", "spot"}
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for path in pure
        for line, name in _imports(path)
        if name.split(".")[0] in {"boto3", "botocore"} or name.startswith("governor.adapters")
    ]
    assert offenders == []
