"""checkov over the synthesized template and the organisation spoke: every finding is acknowledged, with its reason,
in infra/nag.py.

checkov runs from its own venv (``make .venv-checkov/.installed``): its pins conflict with the project's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra.app_builder import build_app
from infra.nag import CHECKOV_ACKNOWLEDGED
from tests.conftest import ROOT
from tests.infra.conftest import Synth

CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
ORG = {"id": "o-a1b2c3d4e5", "ou_ids": ["ou-ab12-11111111"], "regions": ["us-east-1", "eu-west-1"]}


def _checkov(template: Path, resources: int) -> list[dict[str, Any]]:
    """checkov's failed checks on one template (which must parse and hold more than ``resources`` resources)."""
    if not CHECKOV.exists():
        message = "checkov is not installed: make .venv-checkov/.installed"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(
        [str(CHECKOV), "-f", str(template), "--framework", "cloudformation", "-o", "json", "--quiet", "--compact",
         "--skip-download"],
        capture_output=True, text=True, check=False, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["summary"]["parsing_errors"] == 0
    assert report["summary"]["resource_count"] > resources
    checks: list[dict[str, Any]] = report["results"].get("failed_checks", [])
    return checks


@pytest.fixture(scope="module")
def failed(synth: Synth) -> list[dict[str, Any]]:
    return _checkov(synth.outdir / f"{synth.stack.stack_name}.template.json", 100)


@pytest.fixture(scope="module")
def spoke_failed(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The spoke the organisation hub's StackSet deploys into every member account and region."""
    app, stack = build_app(context={"organization": ORG})
    template = app.synth().get_stack_by_name(stack.stack_name).template
    (stack_set,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudFormation::StackSet"]
    spoke = tmp_path_factory.mktemp("spoke") / "spoke.template.json"
    spoke.write_text(json.dumps(json.loads(stack_set["Properties"]["TemplateBody"]), indent=1))
    return _checkov(spoke, 20)


def _acknowledged(check: dict[str, Any]) -> bool:
    entry = CHECKOV_ACKNOWLEDGED.get(check["check_id"])
    if entry is None:
        return False
    resources, reason = entry
    logical_id = check["resource"].rsplit(".", 1)[-1]
    return bool(reason) and (resources == "*" or logical_id.startswith(tuple(resources)))


def test_every_checkov_finding_is_acknowledged_with_a_reason(failed: list[dict[str, Any]]) -> None:
    open_findings = [f"{c['check_id']} {c['check_name']}: {c['resource']}" for c in failed if not _acknowledged(c)]
    assert not open_findings, "\n".join(open_findings)


def test_every_checkov_finding_on_the_spoke_is_acknowledged_with_a_reason(spoke_failed: list[dict[str, Any]]) -> None:
    """What every member account deploys is checked too (its forwarding DLQ has no project key to use)."""
    open_findings = [
        f"{c['check_id']} {c['check_name']}: {c['resource']}" for c in spoke_failed if not _acknowledged(c)
    ]
    assert not open_findings, "\n".join(open_findings)


#: Acknowledgements for resources only some policies deploy: the public Slack endpoint exists only while
#: ``interactions.buttons`` is on (issue 33).
ONLY_WITH_BUTTONS = frozenset({"CKV_AWS_258"})


def test_every_acknowledgement_is_still_needed(
    failed: list[dict[str, Any]], spoke_failed: list[dict[str, Any]], synth: Synth
) -> None:
    expected = set(CHECKOV_ACKNOWLEDGED)
    if not synth.stack.policy.interactions.buttons:
        expected -= ONLY_WITH_BUTTONS
    assert {c["check_id"] for c in [*failed, *spoke_failed]} == expected
