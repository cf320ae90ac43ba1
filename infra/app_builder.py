"""Build the CDK app from a policy file: shared by ``app.py``, ``make demo``'s summary, the tests and the bench.

The context is loaded the way the CDK CLI loads it, so every caller synthesizes the template ``cdk deploy`` deploys:
``cdk.json``'s ``context`` (feature flags included), then ``cdk.context.json``, then what the CLI passes in
``CDK_CONTEXT_JSON`` (its ``-c key=value`` values), then the caller's ``context`` overrides.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from aws_cdk import Annotations, App, Environment

from governor.policy import Policy, load_policy, policy_warnings
from infra import nag
from infra.settings import CDK_JSON, Settings
from infra.stacks.governor_stack import GovernorStack


def project_context(cdk_json: Path = CDK_JSON) -> dict[str, Any]:
    """``cdk.json``'s context merged with ``cdk.context.json`` (the CLI's cached lookups), as the CLI does."""
    context: dict[str, Any] = dict(json.loads(cdk_json.read_text(encoding="utf-8")).get("context", {}))
    cached = cdk_json.parent / "cdk.context.json"
    if cached.is_file():
        context.update(json.loads(cached.read_text(encoding="utf-8")))
    return context


def build_app(
    *,
    policy: Policy | None = None,
    policy_file: Path | None = None,
    outdir: str | None = None,
    context: dict[str, Any] | None = None,
    deployable: bool = False,
) -> tuple[App, GovernorStack]:
    """Raises ``PolicyError`` for a bad policy file and ``SettingsError`` for bad context, before any construct; the
    policy file's warnings (a deprecated key) are warnings on the stack, which ``cdk synth`` prints.

    ``deployable`` (``app.py`` only) requires the verified layer build; otherwise a placeholder layer stands in, so
    the tests, the demo's summary and the benchmarks inspect the same template without building the layer.
    """
    # App applies `context` first, then CDK_CONTEXT_JSON (the CLI), then `post_cli_context` (explicit overrides).
    app = App(outdir=outdir, context=project_context(), post_cli_context=context or None)
    settings = replace(Settings.from_context(app.node.try_get_context), deployable=deployable)
    warned: list[str] = []
    if policy is None:
        with policy_warnings() as warned:
            policy = load_policy(policy_file or settings.policy_file)
    stack = GovernorStack(
        app,
        settings.stack_name,
        policy=policy,
        settings=settings,
        env=Environment(account=app.node.try_get_context("account"), region=settings.region),
    )
    for warning in warned:
        Annotations.of(stack).add_warning_v2("governor:policy-warning", warning)
    nag.enable(app)
    nag.acknowledge_nist(stack)
    return app, stack
