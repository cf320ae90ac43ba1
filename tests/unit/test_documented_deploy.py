"""The deploy commands the docs show are the ones ``make deploy-check`` runs (read from the docs), and they cover
what issue 32 asked CI to run: one account and region, the second region, the organisation hub, status, destroy."""

from __future__ import annotations

import re

from governor_cli.testing.deploy_check import MUST_FAIL, documented_commands
from tests.conftest import ROOT


def test_the_check_reads_the_commands_from_the_docs() -> None:
    commands = [c.text for c in documented_commands()]
    assert "npx cdk deploy -c account=111122223333 -c region=us-east-1" in commands
    assert any(
        "-c region=eu-west-1 -c audit_region=us-east-1" in c and c.startswith("npx cdk deploy") for c in commands
    )
    assert any("organization=" in c for c in commands)
    assert any(c.startswith("npx cdk destroy") for c in commands)
    assert any(c.startswith("governor status --stack") for c in commands)
    assert all(re.match(r"(npx cdk|governor) ", c) for c in commands), "only the pinned CLI and governor"


def test_no_doc_tells_users_to_run_an_unpinned_cdk() -> None:
    for doc in ("README.md", "docs/deploy.md", "docs/organization.md", "docs/slack.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert "npm install -g aws-cdk" not in text, doc
        assert not re.search(r"^\s*cdk (synth|deploy|destroy|bootstrap)", text, re.M), doc


def test_settings_aws_would_refuse_are_checked_with_the_real_cli_too() -> None:
    assert {"context stack_name", "context layer"} == set(MUST_FAIL.values())
    long_name = next(t for t, s in MUST_FAIL.items() if s == "context stack_name")
    assert len(re.search(r"stack_name=(\S+)", long_name).group(1)) == 40  # type: ignore[union-attr]
