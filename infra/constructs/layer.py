"""The dependency layer, built without Docker.

``make layer`` runs ``pip install --platform manylinux2014_aarch64 --only-binary=:all:`` from
``lambdas/requirements.txt`` into ``build/layer/python`` (cdk.json's ``build`` hook does it before every deploy).
When that folder is absent (tests, ``make demo``'s synth) the pinned public Powertools layer stands in, so nothing
ever needs a layer build to synthesize.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_

from infra.settings import LAYER_BUILD_DIR, Settings

_CACHE_ATTR = "_governor_layer"


def dependency_layer(stack: Stack, settings: Settings) -> lambda_.ILayerVersion:
    """One layer per stack, shared by every function."""
    existing = getattr(stack, _CACHE_ATTR, None)
    if existing is not None:
        return existing
    use_build = settings.layer == "build" or (settings.layer == "auto" and (LAYER_BUILD_DIR / "python").is_dir())
    layer: lambda_.ILayerVersion
    if use_build:
        layer = lambda_.LayerVersion(
            stack,
            "DependencyLayer",
            code=lambda_.Code.from_asset(str(LAYER_BUILD_DIR)),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_14],
            compatible_architectures=[lambda_.Architecture.ARM_64],
            description="GPU Fleet Governor runtime dependencies (lambdas/requirements.txt)",
        )
    else:
        arn = (
            f"arn:{stack.partition}:lambda:{stack.region}:017000801446:layer:"
            f"AWSLambdaPowertoolsPythonV3-python314-arm64:{settings.powertools_layer_version}"
        )
        layer = lambda_.LayerVersion.from_layer_version_arn(stack, "PowertoolsLayer", arn)
    setattr(stack, _CACHE_ATTR, layer)
    return layer
