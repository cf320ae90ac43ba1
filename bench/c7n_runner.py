"""Run Cloud Custodian's idle-GPU ``metrics`` policy against an endpoint and count its AWS API calls.

Executed by the bench-only c7n virtual environment (``bench/.venv-c7n``), never imported by the project:
``python bench/c7n_runner.py ENDPOINT OUTDIR`` prints one JSON line with calls per service, matches and wall time.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

POLICY = """
policies:
  - name: idle-gpu-instances
    resource: ec2
    filters:
      - "State.Name": running
      - type: value
        key: InstanceType
        op: regex
        value: "^(p|g|trn|inf|dl)[0-9].*"
      - type: metrics
        namespace: CWAgent
        name: nvidia_smi_utilization_gpu
        statistics: Maximum
        days: 0.0834
        period: 3600
        value: 5
        op: less-than
"""


def main() -> int:
    endpoint, outdir = sys.argv[1], Path(sys.argv[2])
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    import botocore.client

    calls: Counter[str] = Counter()
    original = botocore.client.BaseClient._make_api_call

    def counting(self, operation_name, api_params):  # type: ignore[no-untyped-def]
        calls[f"{self.meta.service_model.service_name}:{operation_name}"] += 1
        return original(self, operation_name, api_params)

    botocore.client.BaseClient._make_api_call = counting  # type: ignore[method-assign]
    from c7n.cli import main as custodian

    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as policy:
        policy.write(POLICY)
    started, cpu = time.perf_counter(), time.process_time()
    sys.argv = ["custodian", "run", "--cache-period", "0", "-s", str(outdir), "--region", "us-east-1", policy.name]
    with contextlib.suppress(SystemExit):  # custodian's CLI exits when the run is over
        custodian()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    resources = outdir / "idle-gpu-instances" / "resources.json"
    matched = len(json.loads(resources.read_text())) if resources.exists() else None
    print(json.dumps({"calls": dict(calls), "matched": matched, "wall_seconds": wall, "cpu_seconds": cpu}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
