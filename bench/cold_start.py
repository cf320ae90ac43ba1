"""Cold start: handler import time, first invocation in a fresh process, code asset and layer sizes; c7n's too.

* Import time: ``python -X importtime -c "import governor.handlers.<name>"`` in a fresh process, the sum of every
  module's own time (what the interpreter spent importing), median of ``--runs``; c7n's ``c7n.handler`` likewise in
  its virtual environment.
* First invocation: a fresh process that imports the handler and calls ``lambda_handler`` twice with a
  representative event, the environment the Lambda factory gives the function, against a local emulator running in
  the parent process (so the child pays for every import itself); median of ``--runs`` fresh processes.
* Sizes: the code asset as CDK packages it (``lambdas/`` minus ASSET_EXCLUDES), the dependency layer built as
  ``make layer`` builds it (pip for manylinux2014_aarch64, into a temporary folder), c7n with its dependencies as
  installed in its virtual environment; each unzipped and zipped (deflate).

    .venv/bin/python -m bench.cold_start [--runs 3] [--no-layer]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from bench.common import C7N_PYTHON, PY, ROOT, Figure, human_bytes, median

HANDLERS = ("idle", "keys", "lifecycle", "network", "notifier", "report", "spot")
INVOKED = ("idle", "keys", "network", "spot")
ASSET_EXCLUDES = ["**/__pycache__", "**/*.pyc", "requirements.txt", "*.egg-info"]
REGION = "us-east-1"


def import_microseconds(python: str, module: str, env: dict[str, str] | None = None) -> int:
    """Total import time of ``module`` in a fresh interpreter: the sum of every module's self time (-X importtime)."""
    done = subprocess.run(
        [python, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    total = 0
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            own = line.split(":", 1)[1].split("|")[0].strip()
            if own.isdigit():
                total += int(own)
    return total


def _excluded(relative: str) -> bool:
    parts = relative.split("/")
    for pattern in ASSET_EXCLUDES:
        bare = pattern.removeprefix("**/")
        if fnmatch.fnmatch(relative, pattern) or any(fnmatch.fnmatch(p, bare) for p in parts):
            return True
    return False


def folder_sizes(root: Path, files: list[Path]) -> tuple[int, int]:
    """(unzipped bytes, zipped bytes) of ``files`` under ``root``, zipped with deflate as Lambda accepts."""
    unzipped = sum(f.stat().st_size for f in files)
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "asset.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
            for f in files:
                bundle.write(f, f.relative_to(root).as_posix())
        zipped = archive.stat().st_size
    return unzipped, zipped


def code_asset() -> tuple[int, int, int]:
    """The governor's code asset: (files, unzipped, zipped)."""
    root = ROOT / "lambdas"
    files = [f for f in root.rglob("*") if f.is_file() and not _excluded(f.relative_to(root).as_posix())]
    unzipped, zipped = folder_sizes(root, files)
    return len(files), unzipped, zipped


def layer(target: Path) -> tuple[int, int, float] | str:
    """Build the layer as ``make layer`` does; (unzipped, zipped, build seconds), or why it was not built."""
    began = time.perf_counter()
    python = target / "python"
    python.mkdir(parents=True)
    done = subprocess.run(
        [
            "python3",
            "-m",
            "pip",
            "install",
            "-q",
            "--platform",
            "manylinux2014_aarch64",
            "--implementation",
            "cp",
            "--python-version",
            "3.14",
            "--only-binary=:all:",
            "--target",
            str(python),
            "-r",
            str(ROOT / "lambdas" / "requirements.txt"),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return f"not built: pip failed ({done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'no output'})"
    files = [f for f in target.rglob("*") if f.is_file()]
    unzipped, zipped = folder_sizes(target, files)
    return unzipped, zipped, time.perf_counter() - began


def c7n_installed() -> tuple[int, int, int, int]:
    """c7n alone, and c7n with every dependency in its venv (without pip/setuptools): unzipped and zipped each."""
    site = next((ROOT / "bench" / ".venv-c7n" / "lib").glob("python3*/site-packages"))
    tooling = ("pip", "setuptools", "_distutils_hack", "distutils-precedence.pth", "pkg_resources")
    everything = [
        f
        for f in site.rglob("*")
        if f.is_file() and not f.relative_to(site).parts[0].startswith(tooling) and "__pycache__" not in f.parts
    ]
    own = [f for f in everything if f.relative_to(site).parts[0] == "c7n"]
    return (*folder_sizes(site, own), *folder_sizes(site, everything))


def _child_invoke(function: str, event_file: str) -> None:
    """Runs in the fresh process: import the handler, invoke it twice, print the timings as JSON."""
    started = time.perf_counter()
    import importlib

    module = importlib.import_module(f"governor.handlers.{function}")
    imported = time.perf_counter()
    from governor.demo.run import LambdaContext

    events = json.loads(Path(event_file).read_text())
    context_ready = time.perf_counter()
    first = module.lambda_handler(events[0], LambdaContext(function))
    invoked = time.perf_counter()
    module.lambda_handler(events[1], LambdaContext(function))
    second = time.perf_counter()
    print(
        json.dumps(
            {
                "import_ms": (imported - started) * 1000,
                "first_ms": (invoked - context_ready) * 1000,
                "second_ms": (second - invoked) * 1000,
                "status": str(first.get("status")) if isinstance(first, dict) else str(type(first)),
            }
        )
    )


def _events(function: str, index: int, setup: dict[str, Any]) -> list[dict[str, Any]]:
    """Two distinct representative events for ``function`` (distinct ids: idempotency would short-cut a repeat)."""
    events: list[dict[str, Any]] = []
    for n in range(2):
        tag = f"{index}-{n}-{time.monotonic_ns()}"
        if function == "idle":
            events.append(
                {
                    "version": "0",
                    "id": f"cold-{tag}",
                    "detail-type": "Scheduled Event",
                    "source": "aws.scheduler",
                    "account": "123456789012",
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "region": REGION,
                    "resources": [],
                    "detail": {},
                }
            )
        elif function == "spot":
            events.append(
                {
                    "version": "0",
                    "id": f"cold-{tag}",
                    "detail-type": "EC2 Spot Instance Interruption Warning",
                    "source": "aws.ec2",
                    "account": "123456789012",
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "region": REGION,
                    "resources": [],
                    "detail": {"instance-id": setup["instance"], "instance-action": "terminate"},
                }
            )
        elif function == "network":
            from bench.network_latency import _event as network_event

            events.append(network_event(index * 2 + n, setup["group"], 20000 + index * 2 + n, f"sgr-{tag}"))
            events[-1]["id"] = f"cold-{tag}"
        elif function == "keys":
            from bench.keys_latency import _event as keys_event

            template = json.loads((ROOT / "tests" / "fixtures" / "keys" / "disable_key_rotation.json").read_text())
            events.append(keys_event(template, index * 2 + n, *setup["key"]))
            events[-1]["id"] = f"cold-{tag}"
    return events


def first_invocations(runs: int) -> dict[str, dict[str, Any]]:
    """Per invoked handler: median import, first and second invocation ms over ``runs`` fresh processes."""
    import boto3

    from bench.idle_vs_custodian import emulator
    from governor.demo.bootstrap import create_shared
    from governor.policy import parse_policy

    out: dict[str, dict[str, Any]] = {}
    with emulator() as endpoint, tempfile.TemporaryDirectory(prefix="cold-") as scratch:
        stack = create_shared(REGION)
        ec2 = boto3.client("ec2", region_name=REGION)
        image = "ami-12c6146b"  # moto accepts any image id
        instance = ec2.run_instances(
            ImageId=image,
            InstanceType="g5.xlarge",
            MinCount=1,
            MaxCount=1,
            InstanceMarketOptions={"MarketType": "spot"},
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "owner", "Value": "bench"}]}],
        )["Instances"][0]["InstanceId"]
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        group = ec2.create_security_group(GroupName="gpu-training", Description="bench", VpcId=vpc)["GroupId"]
        meta = boto3.client("kms", region_name=REGION).create_key(Description="bench")["KeyMetadata"]
        setup = {"instance": instance, "group": group, "key": (meta["KeyId"], meta["Arn"])}
        policy = parse_policy({})
        for function in INVOKED:
            samples: list[dict[str, Any]] = []
            walls: list[float] = []
            for index in range(runs):
                event_file = Path(scratch) / f"{function}-{index}.json"
                event_file.write_text(json.dumps(_events(function, index, setup)))
                env = {
                    **os.environ,
                    **stack.environment(function, policy),
                    "AWS_ENDPOINT_URL": endpoint,
                    "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": REGION,
                    "AWS_REGION": REGION,
                    "POWERTOOLS_TRACE_DISABLED": "true",
                    "POWERTOOLS_LOG_LEVEL": "ERROR",
                }
                began = time.perf_counter()
                done = subprocess.run(
                    [PY, "-m", "bench.cold_start", "--invoke", function, str(event_file)],
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=ROOT,
                )
                walls.append(time.perf_counter() - began)
                lines = [line for line in done.stdout.splitlines() if line.startswith('{"import_ms"')]
                if done.returncode != 0 or not lines:
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    out[function] = {"error": tail[:160]}
                    break
                samples.append(json.loads(lines[-1]))
            if samples and function not in out:
                out[function] = {
                    "import_ms": median([s["import_ms"] for s in samples]),
                    "first_ms": median([s["first_ms"] for s in samples]),
                    "second_ms": median([s["second_ms"] for s in samples]),
                    "process_s": median(walls),
                    "status": samples[-1]["status"],
                    "runs": len(samples),
                }
    return out


def measure(runs: int, build_layer: bool, command: str) -> list[Figure]:
    """Every cold-start figure as table rows."""
    section = "2. Cold start and package size"
    rows: list[Figure] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lambdas")}
    for name in HANDLERS:
        micros = [import_microseconds(PY, f"governor.handlers.{name}", env) for _ in range(runs)]
        rows.append(
            Figure(
                section,
                f"import governor.handlers.{name} (median of {runs})",
                f"{median(micros) / 1000:.0f} ms",
                command,
            )
        )
    if C7N_PYTHON.exists():
        micros = [import_microseconds(str(C7N_PYTHON), "c7n.handler") for _ in range(runs)]
        rows.append(
            Figure(
                section,
                f"import c7n.handler, Custodian's Lambda entry (median of {runs})",
                f"{median(micros) / 1000:.0f} ms",
                command,
            )
        )
    for function, r in first_invocations(runs).items():
        if "error" in r:
            rows.append(
                Figure(section, f"{function}: first invocation in a fresh process", "failed", command, r["error"])
            )
            continue
        rows.append(
            Figure(
                section,
                f"{function}: fresh process, import + first / second invocation (median of {r['runs']})",
                f"{r['import_ms']:.0f} ms + {r['first_ms']:.0f} ms / {r['second_ms']:.0f} ms",
                command,
                f"lambda_handler on the local emulator, default (report-only) policy; result {r['status']}",
            )
        )
    files, unzipped, zipped = code_asset()
    rows.append(
        Figure(
            section,
            f"Lambda code asset (lambdas/, {files} files)",
            f"{human_bytes(zipped)} zipped, {human_bytes(unzipped)} unzipped",
            command,
        )
    )
    if build_layer:
        with tempfile.TemporaryDirectory(prefix="layer-") as scratch:
            built = layer(Path(scratch))
        if isinstance(built, str):
            rows.append(Figure(section, "dependency layer (arm64)", built, command))
        else:
            rows.append(
                Figure(
                    section,
                    "dependency layer (arm64, lambdas/requirements.txt)",
                    f"{human_bytes(built[1])} zipped, {human_bytes(built[0])} unzipped",
                    command,
                    f"built like `make layer` in {built[2]:.0f}s",
                )
            )
    else:
        rows.append(Figure(section, "dependency layer (arm64)", "not built (--no-layer)", command))
    if C7N_PYTHON.exists():
        own_u, own_z, all_u, all_z = c7n_installed()
        rows.append(
            Figure(section, "c7n package alone", f"{human_bytes(own_z)} zipped, {human_bytes(own_u)} unzipped", command)
        )
        rows.append(
            Figure(
                section,
                "c7n with its installed dependencies (boto3 included)",
                f"{human_bytes(all_z)} zipped, {human_bytes(all_u)} unzipped",
                command,
            )
        )
    return rows


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--invoke":
        _child_invoke(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-layer", action="store_true")
    args = parser.parse_args()
    command = " ".join(["python -m bench.cold_start", *sys.argv[1:]])
    for row in measure(args.runs, not args.no_layer, command):
        print(f"{row.name}: {row.value}" + (f"  ({row.note})" if row.note else ""), flush=True)


if __name__ == "__main__":
    main()
