"""What a deploy uploads as Lambda code: the ``governor`` runtime package, and none of the operator tooling beside it
(the CLI, demo, simulator and fault injection live in ``cli/governor_cli``), nor the tests or the benchmarks."""

from __future__ import annotations

import json
from pathlib import Path

from governor.registry import REGISTRY
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
        "registry.py",
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
