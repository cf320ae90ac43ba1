"""What a handler's cold start loads: no boto3 until the first client, no X-Ray SDK unless tracing is switched on,
and no report, audit or CLI code in an enforcement function (each checked in a fresh interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from governor.observability import LazyTracer, tracing_enabled
from governor.registry import REGISTRY
from tests.conftest import ROOT

#: The functions that act on the fleet's resources (in member accounts too, in organisation mode), from the registry.
ENFORCERS = tuple(name for name, capability in REGISTRY.items() if capability.member_accounts)
NEVER_IN_ENFORCERS = (
    "governor.audit",
    "governor_cli",
    "governor.report.domain",
    "governor.report.model",
    "governor.report.sections",
    "governor.report.build",
    "governor.report.render",
    "governor.report.handler",
    "duckdb",
    "sqlglot",
)


def _fresh(code: str, **env: str) -> Any:
    """What ``code`` prints as JSON, run in a fresh interpreter on the runtime alone, without the function settings."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GOVERNOR_", "POWERTOOLS_TRACE"))}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**environ, "PYTHONPATH": str(ROOT / "lambdas"), **env},
    )
    return json.loads(done.stdout)


def _loaded_after_import(module: str, **env: str) -> list[str]:
    loaded: list[str] = _fresh(f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))", **env)
    return loaded


@pytest.mark.parametrize("name", ENFORCERS)
def test_an_enforcer_imports_no_report_audit_or_cli_code(name: str) -> None:
    loaded = _loaded_after_import(f"governor.{name}.handler")
    assert [m for m in loaded if m.startswith(NEVER_IN_ENFORCERS)] == []


def test_the_kubernetes_client_is_imported_only_by_the_drain_path() -> None:
    """lightkube (and its HTTP stack) is loaded when a cluster's node is drained, not at any function's cold start."""
    for name in (*ENFORCERS, "notifier", "report", "interactions"):
        loaded = _loaded_after_import(f"governor.{name}.handler")
        assert [m for m in loaded if m.split(".")[0] in ("lightkube", "httpx2", "anyio", "msgspec")] == [], name
    loaded = _loaded_after_import("governor.idle.kubernetes.nodes")
    assert "lightkube" not in loaded  # not even by the adapter: the first call imports it


@pytest.mark.parametrize("name", [*ENFORCERS, "notifier", "report"])
def test_importing_a_handler_builds_no_aws_client_and_no_tracer(name: str) -> None:
    loaded = _loaded_after_import(f"governor.{name}.handler")
    assert "boto3" not in loaded and "botocore.session" not in loaded  # boto3 comes with the first client
    assert not any(m.startswith("aws_xray_sdk") for m in loaded)


@pytest.mark.parametrize("name", [*ENFORCERS, "notifier", "report", "interactions"])
def test_importing_a_handler_builds_no_model_and_loads_no_powertools_parser_models(name: str) -> None:
    """Every model defers its validator to its first use (``defer_build``), and the EventBridge envelope is ours, not
    Powertools' ``parser.models`` package (150-odd models for every AWS event source)."""
    code = (
        f"import json, sys, pydantic, governor.{name}.handler\n"
        "def subs(c):\n"
        "    for s in c.__subclasses__():\n"
        "        yield s\n"
        "        yield from subs(s)\n"
        "built = sorted(f'{c.__module__}.{c.__qualname__}' for c in subs(pydantic.BaseModel) if c.__pydantic_complete__)\n"
        "print(json.dumps({'built': built, 'loaded': sorted(sys.modules)}))"
    )
    found = _fresh(code)
    assert found["built"] == []
    assert not any(m.startswith("aws_lambda_powertools.utilities.parser") for m in found["loaded"])


def test_every_runtime_model_defers_its_build() -> None:
    """Every model derives from ``governor.domain.model.Model`` (``defer_build``); one that did not would build its
    validator at every function's import again."""
    import importlib
    import pkgutil

    import pydantic

    import governor

    for module in pkgutil.walk_packages(governor.__path__, "governor."):
        importlib.import_module(module.name)

    def subclasses(cls: type) -> list[type]:
        return [s for c in cls.__subclasses__() for s in (c, *subclasses(c))]

    eager = [
        f"{c.__module__}.{c.__qualname__}"
        for c in subclasses(pydantic.BaseModel)
        if c.__module__.startswith("governor.") and not c.model_config.get("defer_build")
    ]
    assert eager == []


@pytest.mark.parametrize("name", [name for name, capability in REGISTRY.items() if capability.fans_out])
def test_a_single_account_sweep_never_imports_the_fan_out(name: str) -> None:
    loaded = _loaded_after_import(f"governor.{name}.handler")
    assert "governor.fanout" not in loaded


def test_the_idle_sweep_imports_no_slack_code() -> None:
    loaded = _loaded_after_import("governor.idle.handler")
    # The interactions section's model is part of every function's Policy (composed from the registry), and its
    # declaration of the registry itself: neither is Slack code.
    section = {"governor.interactions", "governor.interactions.policy", "governor.interactions.capability"}
    slack = ("governor.interactions", "governor.adapters.slack", "governor.domain.messages", "slack_sdk")
    assert not any(m.startswith(slack) for m in set(loaded) - section)


def test_the_slack_endpoint_and_the_notifier_load_no_other_capabilitys_slack_code() -> None:
    """The endpoint answers Slack within 3 s: ``slack_sdk`` comes with its first call (the shared Slack app adapter
    imports it lazily). The notifier loads the shared Slack adapters, not the interactions code behind its buttons."""
    endpoint = _loaded_after_import("governor.interactions.handler")
    assert "governor.adapters.slack_app" in endpoint
    assert not any(m.startswith("slack_sdk") for m in endpoint)
    notifier = _loaded_after_import("governor.notifier.handler")
    section = {"governor.interactions", "governor.interactions.policy", "governor.interactions.capability"}
    assert [m for m in notifier if m.startswith("governor.interactions") and m not in section] == []


def test_tracing_switched_on_loads_the_xray_sdk() -> None:
    loaded = _loaded_after_import("governor.keys.handler", GOVERNOR_TRACING="true")
    assert any(m.startswith("aws_xray_sdk") for m in loaded)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"GOVERNOR_TRACING": "true"}, True),
        ({"GOVERNOR_TRACING": "off"}, False),
        ({"POWERTOOLS_TRACE_DISABLED": "false"}, True),
        ({"POWERTOOLS_TRACE_DISABLED": "true"}, False),
        ({"GOVERNOR_TRACING": "false", "POWERTOOLS_TRACE_DISABLED": "false"}, False),
    ],
)
def test_tracing_is_off_unless_switched_on(environ: dict[str, str], expected: bool) -> None:
    assert tracing_enabled(environ) is expected


def test_an_untraced_handler_is_the_handler_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOVERNOR_TRACING", raising=False)
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED", raising=False)
    tracer = LazyTracer("test")

    def handler(event: dict[str, str], context: object) -> dict[str, str]:
        return event

    assert tracer.capture_lambda_handler(handler) is handler
    assert not tracer.active
