"""The committed cost model is what the code does now: the smaller busy fleet is measured again on moto, and each
scheduled run's billable units (API calls, DynamoDB units and bytes, metrics requested, findings, log bytes) must be
what lambdas/governor/footprint/measured.py predicts for that fleet (its fixed part plus its part per instance, fitted
through this very size). A change that makes a sweep call more, write bigger items
or log more fails here until the model is re-measured (``python -m governor_cli.cost.measure --write``), so the
figures ``governor cost``, the deploy guide and the report print stay true."""

from __future__ import annotations

import pytest

from governor.footprint.usage import load_model
from governor_cli.cost.measure import busy_fleet

#: Units that depend on this machine, not on the code: CPU time.
MACHINE = ("cpu_seconds",)
#: Byte counts carry timestamps and generated ids whose lengths vary slightly from run to run.
BYTES_TOLERANCE = 0.03


def test_the_committed_model_is_what_the_code_does_now() -> None:
    model = load_model()
    size = model["measured"]["sizes"][0]
    measured = busy_fleet(size, life=False)
    drifted = []
    for trigger in ("idle.Sweep", "network.DriftSweep", "keys.Sweep", "lifecycle.Reconcile"):
        entry = model["invocations"][trigger]
        per = entry.get("per_instance", {})
        units = {u: entry["fixed"].get(u, 0.0) + per.get(u, 0.0) * size for u in {*entry["fixed"], *per}}
        now = measured[trigger]
        for unit in sorted(set(units) | set(now)):
            if unit in MACHINE:
                continue
            before, after = units.get(unit, 0.0), now.get(unit, 0.0)
            tolerance = BYTES_TOLERANCE if "bytes" in unit else 0.001
            if after != pytest.approx(before, rel=tolerance, abs=1e-6):
                drifted.append(f"{trigger} {unit}: model {before}, now {after}")
    assert drifted == [], "re-measure: python -m governor_cli.cost.measure --write\n" + "\n".join(drifted)
