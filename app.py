#!/usr/bin/env python3
"""CDK entry point: load governor.yaml, build the stack, run cdk-nag. A bad policy stops here with exit code 2."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20,22")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "20,22")

from governor_paths import ensure_paths

ensure_paths()

from governor.policy import PolicyError  # noqa: E402
from infra.app_builder import build_app  # noqa: E402


def main() -> int:
    try:
        app, _stack = build_app(outdir=os.environ.get("CDK_OUTDIR", "cdk.out"))
    except PolicyError as error:
        print(f"cdk synth stopped: {error}", file=sys.stderr)
        return 2
    app.synth()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
