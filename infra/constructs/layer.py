"""The dependency layer: the verified build of ``lambdas/requirements.txt`` for the functions' runtime, or nothing.

``make layer`` (cdk.json's ``build`` hook, so before every ``cdk`` command) builds ``build/layer/python`` for
CPython 3.14 arm64 and writes ``build/layer-manifest.json`` only once the build is complete and verified
(``infra.build_layer``). ``app.py`` synthesizes only with that build: a missing, failed, empty or stale build (the
manifest's fingerprint is not today's requirements) stops the synth with one line naming the ``layer`` setting, and
the code asset plus the layer must fit Lambda's 250 MB unzipped.

There is no public-layer fallback any more: AWS's public Powertools layer has no slack_sdk, PyYAML or matplotlib,
so the notifier, every policy load and the report would fail at run time.

In-process synths that inspect the template without deploying it (the tests, ``governor demo``'s summary, the
benchmarks) pass ``deployable=False`` to ``infra.app_builder.build_app`` and get a placeholder layer instead, whose
description says it cannot be deployed; ``app.py`` never does.
"""

from __future__ import annotations

import json
from pathlib import Path

from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_

from infra.asset import asset_files
from infra.build_layer import LAMBDA_UNZIPPED_LIMIT, REQUIREMENTS, fingerprint, size
from infra.settings import ROOT, Settings, SettingsError

_CACHE_ATTR = "_governor_layer"
PLACEHOLDER_DIR = ROOT / "infra" / "layer_placeholder"
PLACEHOLDER_DESCRIPTION = "PLACEHOLDER for template inspection, not deployable: run make layer and cdk synth"


def _fix(why: str) -> SettingsError:
    return SettingsError(f"context layer=build: {why}; run `make layer` (cdk.json's build hook runs it before cdk)")


def verified_build(settings: Settings, code_bytes: int) -> Path:
    """The built layer folder, if it is a verified build of today's requirements that fits with ``code_bytes``."""
    folder, manifest = settings.layer_dir, settings.layer_manifest
    if not manifest.is_file() or not (folder / "python").is_dir():
        raise _fix(f"no verified build in {_shown(folder)} ({_shown(manifest)} is missing)")
    try:
        record = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise _fix(f"{_shown(manifest)} is unreadable ({error})") from None
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint(REQUIREMENTS):
        raise _fix(f"{_shown(folder)} was built from another lambdas/requirements.txt")
    if not record.get("distributions"):
        raise _fix(f"{_shown(folder)} holds no distribution")
    unzipped = size(folder)
    if unzipped + code_bytes >= LAMBDA_UNZIPPED_LIMIT:
        raise SettingsError(
            f"context layer=build: the layer ({unzipped:,} bytes) and the code asset ({code_bytes:,}) are "
            f"{unzipped + code_bytes:,} bytes unzipped; Lambda allows {LAMBDA_UNZIPPED_LIMIT:,} for a function"
        )
    return folder


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def code_asset_bytes() -> int:
    """Unzipped bytes of the code asset, as ``infra.asset`` declares it (the files ``Code.from_asset`` packages)."""
    return sum(path.stat().st_size for path in asset_files())


def dependency_layer(stack: Stack, settings: Settings) -> lambda_.ILayerVersion:
    """One layer per stack, shared by every function."""
    existing = getattr(stack, _CACHE_ATTR, None)
    if existing is not None:
        return existing
    if settings.deployable:
        folder = verified_build(settings, code_asset_bytes())
        description = "GPU Fleet Governor runtime dependencies (lambdas/requirements.txt, CPython 3.14 arm64)"
    else:
        folder, description = PLACEHOLDER_DIR, PLACEHOLDER_DESCRIPTION
    layer = lambda_.LayerVersion(
        stack,
        "DependencyLayer",
        code=lambda_.Code.from_asset(str(folder)),
        compatible_runtimes=[lambda_.Runtime.PYTHON_3_14],
        compatible_architectures=[lambda_.Architecture.ARM_64],
        description=description,
    )
    setattr(stack, _CACHE_ATTR, layer)
    return layer
