"""What a deploy uploads as Lambda code: the ``governor`` runtime package, and none of the operator tooling beside it
(the CLI, demo, simulator, fault injection and test fakes live in ``cli/governor_cli``), nor the tests or the
benchmarks, nor what the runtime package holds for the CLI only (``infra.asset.NOT_RUNTIME``): runtime code only."""

from __future__ import annotations

import ast
import json
import tomllib
from fnmatch import fnmatchcase
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from governor.audit.queries import QUERIES_DIR, list_queries
from governor.registry import REGISTRY
from infra.asset import NOT_RUNTIME, RUNTIME_DATA, asset_files, excluded
from infra.dependencies import (
    RUNTIME_PROVIDED,
    installed_closure,
    normalized,
    requirement_lines,
    runtime_reachable,
    shipped_plan,
    third_party,
)
from infra.settings import LAMBDAS_DIR, ROOT
from tests.imports import modules
from tests.infra.conftest import Synth

# Folder or file names that belong to the tooling, the tests or the benchmarks; none may appear at any depth.
NOT_SHIPPED = {"governor_cli", "cli", "cli.py", "__main__.py", "commands", "demo", "sim", "testing", "tests", "bench"}


def code_folders(synth: Synth) -> dict[str, Path]:
    """Each governor function's code, as the folder CDK zips and uploads (from the assets manifest in cdk.out)."""
    manifest = json.loads((synth.outdir / f"{synth.stack.stack_name}.assets.json").read_text())
    folders: dict[str, Path] = {}
    for name, function in synth.resources("AWS::Lambda::Function").items():
        properties = function["Properties"]
        if str(properties.get("Handler", "")).startswith("governor."):
            asset = manifest["files"][properties["Code"]["S3Key"].removesuffix(".zip")]
            assert asset["source"]["packaging"] == "zip"
            folders[name] = synth.outdir / asset["source"]["path"]
    return folders


def test_every_function_ships_the_one_code_asset_and_its_handler_is_in_it(synth: Synth) -> None:
    folders = code_folders(synth)
    assert len(folders) >= 7 and len(set(folders.values())) == 1
    folder = next(iter(folders.values()))
    assert sorted(p.name for p in folder.iterdir()) == ["governor"]
    for name, function in synth.resources("AWS::Lambda::Function").items():
        if name in folders:
            module = function["Properties"]["Handler"].rsplit(".", 1)[0]
            assert folder.joinpath(*module.split(".")).with_suffix(".py").is_file(), module


def test_the_code_asset_holds_the_runtime_and_no_tooling_tests_or_benchmarks(synth: Synth) -> None:
    folder = next(iter(code_folders(synth).values()))
    runtime = folder / "governor"
    for part in (
        "policy.py",
        "observability.py",
        "runtime.py",
        "domain",
        "adapters",
        "events",
        "audit",
        *REGISTRY,
    ):
        assert (runtime / part).exists(), part
    shipped = [p.relative_to(folder).as_posix() for p in folder.rglob("*")]
    assert [path for path in shipped if NOT_SHIPPED & set(path.split("/"))] == []
    assert [path for path in shipped if "__pycache__" in path or path.endswith((".pyc", ".egg-info"))] == []


def _module(relative: str) -> str:
    """``governor/keys/handler.py`` -> ``governor.keys.handler``; a package's ``__init__.py`` is the package."""
    parts = relative.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_asset_is_exactly_what_infra_asset_declares(synth: Synth) -> None:
    """The benchmark's staged copy and this test read ``infra.asset``; CDK's own packaging must agree with it."""
    folder = next(iter(code_folders(synth).values()))
    shipped = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    declared = [p.relative_to(LAMBDAS_DIR).as_posix() for p in asset_files()]
    assert shipped == declared
    for pattern in NOT_RUNTIME:  # every exclusion still names something, or it goes from the list
        assert any(excluded(p.relative_to(LAMBDAS_DIR).as_posix()) for p in LAMBDAS_DIR.rglob(pattern.split("/")[-1]))


def test_every_module_in_the_asset_is_one_a_handler_imports(synth: Synth) -> None:
    """Runtime only: each shipped module is imported (at module level or inside a function) by some registered
    handler, directly or through others; test fakes, benchmark or comparison code and local engines are not, and no
    data file ships but the ones ``infra.asset.RUNTIME_DATA`` names."""
    folder = next(iter(code_folders(synth).values()))
    files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    assert [p for p in files if not p.endswith(".py") and not any(fnmatchcase(p, g) for g in RUNTIME_DATA)] == []
    shipped = [p for p in files if p.endswith(".py")]
    reachable = runtime_reachable()
    assert sorted(_module(p) for p in shipped if _module(p) not in reachable) == []
    # and the other way round: nothing a handler imports is left out (it would fail at its first import in Lambda)
    left_out = {_module(p.relative_to(LAMBDAS_DIR).as_posix()) for p in LAMBDAS_DIR.rglob("*.py")} - {
        _module(p) for p in shipped
    }
    assert sorted(left_out & reachable) == []
    assert {"governor.report.render.html_page", "governor.fanout", "governor.audit.queries"} <= reachable


def test_the_report_s_query_library_ships_in_the_asset_and_the_package(synth: Synth) -> None:
    """The report runs the SQL shipped with its code (docs/security.md, boundary 14): every file of the library
    ``governor audit`` reads is in the code asset, byte for byte, and is package data, so an installed ``governor``
    holds it too; every ``RUNTIME_DATA`` glob names shipped files."""
    folder = next(iter(code_folders(synth).values()))
    specs = list_queries()
    assert len(specs) >= 20 and QUERIES_DIR.is_relative_to(LAMBDAS_DIR)
    for spec in specs:
        relative = spec.path.relative_to(LAMBDAS_DIR).as_posix()
        assert (folder / relative).read_bytes() == spec.path.read_bytes(), relative
    shipped = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    for glob in RUNTIME_DATA:
        assert [p for p in shipped if fnmatchcase(p, glob)], glob
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"
    ]["governor"]
    assert {glob.removeprefix("governor/") for glob in RUNTIME_DATA} <= set(package_data)


def test_the_tooling_flips_no_switch_in_the_runtime() -> None:
    """The demo or a command that needs AWS to behave differently changes the emulator, never a module-level setting of
    the runtime (which would ship, unused, in every function): no module of ``cli/`` assigns to a ``governor`` module's
    attribute or ``setattr``s one. Test support (``governor_cli.testing``) patches as the tests' monkeypatch does."""
    offenders = []
    tooling = [m for m in modules() if m.startswith("governor_cli") and not m.startswith("governor_cli.testing")]
    assert "governor_cli.demo.emulator" in tooling
    for name in tooling:
        tree = ast.parse(modules()[name].read_text(encoding="utf-8"))
        bound = _runtime_modules_bound(tree)
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in bound
                ):
                    offenders.append(f"{name}:{node.lineno} {bound[target.value.id]}.{target.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Name) and first.id in bound:
                    offenders.append(f"{name}:{node.lineno} setattr({bound[first.id]}, ...)")
    assert offenders == []


def _runtime_modules_bound(tree: ast.Module) -> dict[str, str]:
    """Local name -> the ``governor`` module it is bound to by an import (``from governor.adapters import ec2``)."""
    known = modules()
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("governor.") and alias.asname:
                    bound[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("governor"):
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if target in known:
                    bound[alias.asname or alias.name] = target
    return bound


def test_what_a_handler_can_import_is_in_its_own_layers_or_the_lambda_runtime() -> None:
    """A handler never reaches a local engine or other tooling whose library the function does not have (DuckDB,
    sqlglot, moto): every third-party import of every module a handler can load comes from the requirements of that
    function's own layers (with their own requirements) or the Lambda runtime's boto3; and the chart libraries ship
    to the report alone."""
    plan = shipped_plan()
    lines = requirement_lines()
    providers = metadata.packages_distributions()
    missing = []
    for capability in REGISTRY.values():
        own = installed_closure([lines[name] for name in plan.requirements_of(capability.name)])
        own |= installed_closure(Requirement(name) for name in RUNTIME_PROVIDED)
        for top, importers in third_party(capability).items():
            if not {normalized(d) for d in providers.get(top, [top])} & own:
                missing.append(f"{capability.name}: {sorted(importers)[0]} imports {top}")
    assert missing == []
    users = {name: {f for f in plan.functions if name in plan.requirements_of(f)} for name in lines}
    assert users["matplotlib"] == {"report"} and users["lightkube"] == {"idle"}
    assert {"aws-lambda-powertools", "pydantic", "pyyaml"} <= set(plan.requirements_of("spot"))
