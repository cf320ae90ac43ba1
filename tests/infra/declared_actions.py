"""What each function's code can call, read from the code: the adapters its handler imports, and their IAM_ACTIONS.

Static import analysis of ``governor/handlers/<name>.py`` and every ``governor.*`` module it reaches (imports inside
functions included). Importing names from an adapter module counts the module-level ``*_ACTIONS`` sets; a class's own
``IAM_ACTIONS`` (``Ec2Actions.IAM_ACTIONS``) counts only when the class is imported or the whole module is.
"""

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

PACKAGE_ROOT = ROOT / "lambdas"
NOT_RUNTIME = ("governor_cli",)
# Granted by the Lambda factory to every function (infra/constructs/function.py), for the shared runtime:
# logs, ledger, idempotency (Powertools), findings bus, DLQ (also CDK's on-failure destination grant), KMS, X-Ray.
BASE_ACTIONS = frozenset(
    {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "dynamodb:PutItem",
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:BatchWriteItem",
        "dynamodb:BatchGetItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "events:PutEvents",
        "sqs:SendMessage",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
        "kms:Decrypt",
        "kms:Encrypt",
        "kms:GenerateDataKey",
        "kms:GenerateDataKey*",
        "kms:ReEncrypt*",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
    }
)


def module_file(name: str) -> Path | None:
    path = PACKAGE_ROOT.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def _imports(name: str) -> list[tuple[str, str | None]]:
    """(module, imported name or None for the whole module) for every governor import in ``name``."""
    file = module_file(name)
    if file is None:
        return []
    package = name if file.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names if alias.name.startswith("governor"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            if not base.startswith("governor"):
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.append((submodule, None) if module_file(submodule) else (base, alias.name))
    return found


def _units(module_name: str, imported: str | None) -> dict[str, frozenset[str]]:
    module = importlib.import_module(module_name)
    units: dict[str, frozenset[str]] = {}
    for attribute, value in vars(module).items():
        if attribute.endswith("_ACTIONS") and isinstance(value, frozenset):
            units[f"{module_name}.{attribute}"] = value
    names = [imported] if imported else [n for n, v in vars(module).items() if isinstance(v, type)]
    for name in names:
        value: Any = getattr(module, name, None)
        if isinstance(value, type) and value.__module__ == module_name:
            actions = getattr(value, "IAM_ACTIONS", None)
            if isinstance(actions, frozenset):
                units[f"{module_name}.{name}.IAM_ACTIONS"] = actions
    return units


@cache
def declared_units(handler: str) -> dict[str, frozenset[str]]:
    """Every ``*_ACTIONS`` set reachable from ``governor.handlers.<handler>``, by where it is declared."""
    seen: set[str] = set()
    queue = [f"governor.handlers.{handler}"]
    units: dict[str, frozenset[str]] = {}
    while queue:
        current = queue.pop()
        if current in seen:
            continue
        seen.add(current)
        for module, name in _imports(current):
            if module.startswith(NOT_RUNTIME):
                continue
            queue.append(module)
            if module.startswith("governor.adapters."):
                units.update(_units(module, name))
    return units


def declared(handler: str) -> frozenset[str]:
    return frozenset().union(*declared_units(handler).values()) if declared_units(handler) else frozenset()


def handler_modules() -> list[str]:
    """Every handler module present (the capabilities that have landed), private helpers excluded."""
    folder = PACKAGE_ROOT / "governor" / "handlers"
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
