"""Build the CDK app from a policy file: shared by ``app.py``, ``make demo``'s summary and the tests."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import App, Environment

from governor.policy import Policy, load_policy
from infra import nag
from infra.settings import Settings
from infra.stacks.governor_stack import GovernorStack


def build_app(
    *,
    policy: Policy | None = None,
    policy_file: Path | None = None,
    outdir: str | None = None,
    context: dict | None = None,
) -> tuple[App, GovernorStack]:
    """Raises ``PolicyError`` for a bad policy file before any construct is created."""
    app = App(outdir=outdir, context=context or {})
    settings = Settings.from_context(app.node.try_get_context)
    if policy is None:
        policy = load_policy(policy_file or settings.policy_file)
    stack = GovernorStack(
        app,
        settings.stack_name,
        policy=policy,
        settings=settings,
        env=Environment(account=app.node.try_get_context("account"), region=app.node.try_get_context("region")),
    )
    nag.enable(app)
    nag.acknowledge_nist(stack)
    return app, stack
