"""The measured model ``governor cost`` prices (lambdas/governor/footprint/measured.py) against the stack it
describes: each function's memory, and the resources billed by the month (alarms, the dashboard, the key). A change
to the stack that the model has not been re-measured for fails here (``python -m governor_cli.cost.measure --write``)."""

from __future__ import annotations

from collections import Counter

from governor.footprint.usage import load_model
from governor.registry import REGISTRY
from tests.infra.conftest import Synth


def test_the_model_has_the_stacks_monthly_resources(synth: Synth) -> None:
    kinds = Counter(resource["Type"] for resource in synth.json["Resources"].values())
    resources = load_model()["resources"]
    assert resources["alarms"] == kinds["AWS::CloudWatch::Alarm"]
    assert resources["dashboards"] == kinds["AWS::CloudWatch::Dashboard"]
    assert resources["kms_keys"] == kinds["AWS::KMS::Key"]


def test_the_model_has_each_functions_memory(synth: Synth) -> None:
    functions = load_model()["functions"]
    deployed = {
        f["Properties"]["Handler"].split(".")[1]: f["Properties"]["MemorySize"]
        for f in synth.resources("AWS::Lambda::Function").values()
        if str(f["Properties"].get("Handler", "")).startswith("governor.")
    }
    assert set(functions) == set(REGISTRY) and deployed
    for name, memory in deployed.items():
        assert functions[name]["memory_mb"] == memory, name
