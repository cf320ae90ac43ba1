#!/usr/bin/env python3
"""CDK entry point: load cdk.json's context and governor.yaml, build the stack, run cdk-nag.

A bad policy or context stops here with exit code 2. Under ``cdk deploy`` (credentials present) a policy that
reserves Lambda concurrency is checked against the account's quota first; ``-c preflight=false`` skips that.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20,22")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "20,22")

from governor.policy import PolicyError
from infra.app_builder import build_app
from infra.settings import SettingsError


def _preflight(reserved: int | None, region: str | None) -> str | None:
    """The account check for reserved concurrency; skipped (None) without credentials, e.g. a local ``cdk synth``."""
    if not reserved:
        return None
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from infra.preflight import concurrency_problem

    try:
        return concurrency_problem(boto3.client("lambda", region_name=region), reserved)
    except (BotoCoreError, ClientError) as error:
        print(f"preflight skipped: cannot read the Lambda account settings ({error})", file=sys.stderr)
        return None


def main() -> int:
    try:
        app, stack = build_app(outdir=os.environ.get("CDK_OUTDIR", "cdk.out"), deployable=True)
    except (PolicyError, SettingsError) as error:
        print(f"cdk synth stopped: {error}", file=sys.stderr)
        return 2
    if str(app.node.try_get_context("preflight")).lower() != "false":
        region = stack.settings.region or os.environ.get("CDK_DEFAULT_REGION")
        reserved = (stack.policy.spot.reserved_concurrency or 0) + stack.policy.interactions.endpoint_concurrency()
        problem = _preflight(reserved, region)
        if problem:
            print(f"cdk synth stopped: {problem}", file=sys.stderr)
            return 2
    app.synth()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
