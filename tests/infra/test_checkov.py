"""checkov over the synthesized template: every finding is acknowledged, with its reason, in infra/nag.py.

checkov runs from its own venv (``make .venv-checkov/.installed``): its pins conflict with the project's.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from infra.nag import CHECKOV_ACKNOWLEDGED
from tests.conftest import ROOT
from tests.infra.conftest import Synth

CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"


@pytest.fixture(scope="module")
def failed(synth: Synth) -> list[dict[str, Any]]:
    if not CHECKOV.exists():
        message = "checkov is not installed: make .venv-checkov/.installed"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    template = synth.outdir / f"{synth.stack.stack_name}.template.json"
    done = subprocess.run(
        [str(CHECKOV), "-f", str(template), "--framework", "cloudformation", "-o", "json", "--quiet", "--compact",
         "--skip-download"],
        capture_output=True, text=True, check=False, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["summary"]["parsing_errors"] == 0
    assert report["summary"]["resource_count"] > 100
    checks: list[dict[str, Any]] = report["results"].get("failed_checks", [])
    return checks


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


#: Acknowledgements for resources only some policies deploy: the public Slack endpoint exists only while
#: ``interactions.buttons`` is on (issue 33).
ONLY_WITH_BUTTONS = frozenset({"CKV_AWS_258"})


def test_every_acknowledgement_is_still_needed(failed: list[dict[str, Any]], synth: Synth) -> None:
    expected = set(CHECKOV_ACKNOWLEDGED)
    if not synth.stack.policy.interactions.buttons:
        expected -= ONLY_WITH_BUTTONS
    assert {c["check_id"] for c in failed} == expected
