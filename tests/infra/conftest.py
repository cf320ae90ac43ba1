"""Synthesize the CDK app once per test session (per xdist worker), with cdk-nag enforced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import assertions

from infra.app_builder import build_app


class Synth:
    """The synthesized stack: CDK ``Template`` for assertions plus the raw JSON and the output folder."""

    def __init__(self, outdir: Path) -> None:
        app, stack = self._build(outdir)
        assembly = app.synth()  # raises on any unacknowledged cdk-nag finding
        self.stack = stack
        self.template = assertions.Template.from_json(assembly.get_stack_by_name(stack.stack_name).template)
        self.json: dict[str, Any] = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
        self.outdir = outdir

    def _build(self, outdir: Path) -> Any:
        return build_app(outdir=str(outdir))

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.json["Resources"].items() if v["Type"] == kind}


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return Synth(tmp_path_factory.mktemp("cdk.out"))
