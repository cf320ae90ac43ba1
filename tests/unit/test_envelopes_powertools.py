"""Our EventBridge envelope is Powertools' ``EventBridgeModel`` field for field (issue 24 replaced the import, which
loads Powertools' whole ``parser.models`` package, ~150 models, into every function): on every genuine event sample
in ``tests/fixtures`` and on broken variants of them, both accept or both refuse, and what they accept is the same."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import ValidationError

from governor.events.envelopes import EventBridgeEnvelope
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
SAMPLES = sorted(p for p in FIXTURES.rglob("*.json") if '"detail-type"' in p.read_text())


def _variants(event: dict[str, Any]) -> list[tuple[str, Any]]:
    """The sample itself and ways a producer gets it wrong."""
    out: list[tuple[str, Any]] = [("as published", event)]
    for field in ("id", "source", "account", "time", "region", "resources", "detail-type", "detail", "version"):
        broken = {k: v for k, v in event.items() if k != field}
        out.append((f"without {field}", broken))
    for field, value in (
        ("time", "yesterday"),
        ("time", 1700000000),
        ("resources", "arn:aws:ec2:::instance/i-1"),
        ("detail", "not an object"),
        ("detail", "{}"),
        ("detail-type", None),
        ("account", 123456789012),
        ("replay-name", "archive-replay"),
    ):
        out.append((f"{field}={value!r}", {**copy.deepcopy(event), field: value}))
    out.append(("scheduler without payload", {**copy.deepcopy(event), "source": "aws.scheduler", "detail": "{}"}))
    return out


def _outcome(model: type[Any], raw: Any) -> tuple[str, Any]:
    try:
        parsed = model.model_validate(raw)
    except ValidationError as error:
        return "refused", sorted({str(e["loc"][0]) for e in error.errors()})  # the fields, not how many union arms
    return "accepted", parsed.model_dump(by_alias=True)


def test_there_are_genuine_samples() -> None:
    assert len(SAMPLES) >= 9, SAMPLES


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_the_envelope_accepts_and_refuses_what_powertools_does(sample: Path) -> None:
    event = json.loads(sample.read_text())
    for name, raw in _variants(event):
        ours, theirs = _outcome(EventBridgeEnvelope, raw), _outcome(EventBridgeModel, raw)
        assert ours == theirs, name


def test_the_envelope_has_powertools_fields_and_aliases() -> None:
    def shape(model: type[Any]) -> dict[str, tuple[str | None, bool]]:
        return {name: (f.alias, f.is_required()) for name, f in model.model_fields.items()}

    assert shape(EventBridgeEnvelope) == shape(EventBridgeModel)
