"""Cold start: handler import time, first invocation in a fresh process, code asset and layer sizes; c7n's too.

* Import cost: CPU time (user + system, ``getrusage`` of the child) of ``python -c "import <module>"`` in a fresh
  process, minus the CPU of ``python -c pass`` (the interpreter's own start), median of ``--runs``. CPU, not wall
  time: the machine is shared, and CPU time does not count the time spent waiting for a core. Every round runs the
  peers and every handler once, interleaved, so drift hits them alike. Peers: the baseline
  ``import boto3, aws_lambda_powertools, pydantic`` and Custodian's Lambda entry ``import c7n.handler,
  c7n.resources.ec2`` (in bench/.venv-c7n). Ratios are of medians from the same run. Each handler is imported twice:
  as deployed (the code asset's files only; Lambda's ``/var/task`` is read-only and the asset has no bytecode, so
  every module is compiled on import) and with its bytecode cached; Custodian likewise (c7n as ``mu`` archives it,
  ``*.py`` only, and from its compiled site-packages). See :func:`stage`.
* First invocation: a fresh process that imports the handler (as deployed, from source) and calls ``lambda_handler``
  twice with a representative event, the environment the Lambda factory gives the function, against a local emulator
  running in the parent process (so the child pays for every import itself); the child's CPU time from its start to
  the first request it sends to AWS (botocore ``before-send``) is set against the baseline import plus one boto3
  Session creating three clients (ec2, cloudwatch, dynamodb); median of ``--runs`` fresh processes.
* Sizes: the code asset as CDK packages it (``lambdas/`` minus ``infra.asset.ASSET_EXCLUDES``), the dependency layer
  built as ``make layer`` builds it (``infra.build_layer.build``, into a temporary folder), c7n with its dependencies as
  installed in its virtual environment; each unzipped and zipped (deflate).

    .venv/bin/python -m bench.cold_start [--runs 11] [--no-layer]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from bench.common import C7N_PYTHON, PY, ROOT, Figure, human_bytes, median
from infra.asset import asset_files as code_asset_files

BASELINE = "import boto3, aws_lambda_powertools, pydantic"
CUSTODIAN = "import c7n.handler, c7n.resources.ec2"
CLIENTS = (
    "import boto3, aws_lambda_powertools, pydantic; s = boto3.session.Session(); "
    "[s.client(n, region_name='us-east-1') for n in ('ec2', 'cloudwatch', 'dynamodb')]"
)
IMPORT_TARGET = 1.3  # every handler's import <= 1.3x the baseline
CUSTODIAN_TARGET = 0.8  # ... and <= 0.8x Custodian's entry
FIRST_CALL_TARGET = 1.5  # import + first invocation to the first AWS call <= 1.5x baseline + three clients


def handlers() -> tuple[str, ...]:
    """Every registered function; imported on call, so a measuring child never pays for the registry's imports."""
    from governor.registry import REGISTRY

    return tuple(sorted(REGISTRY))


INVOKED = ("idle", "keys", "network", "spot")
REGION = "us-east-1"


def child_cpu_ms(python: str, code: str, env: dict[str, str] | None = None, cwd: str | None = None) -> float:
    """CPU milliseconds (user + system) a fresh ``python -c code`` used, from ``getrusage`` of children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([python, "-c", code], check=True, env=env, capture_output=True, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def asset_files() -> list[Path]:
    """The files of the governor's code asset, as CDK packages ``lambdas/`` (``infra.asset``: no bytecode, nothing
    no function runs)."""
    return code_asset_files(ROOT / "lambdas")


def stage_asset(folder: Path) -> Path:
    """A copy of the code asset in ``folder``: source only, as Lambda runs it from a read-only ``/var/task``, where
    Python compiles every module at every cold start."""
    import shutil

    root = ROOT / "lambdas"
    for f in asset_files():
        (folder / f.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, folder / f.relative_to(root))
    return folder


def stage(scratch: Path) -> dict[str, Path]:
    """The code as each peer's Lambda function holds it, copied under ``scratch``.

    ``source``: the governor's code asset (:func:`stage_asset`). ``compiled``: the same files with their bytecode
    (what a second import on a writable disk sees). ``c7n-source``: the c7n package as Custodian's ``mu`` archives it
    (``*.py`` only, no ``.pyc``). Libraries (boto3, Powertools, pydantic; c7n's dependencies) keep the bytecode pip
    compiled, as in a layer.
    """
    import compileall
    import shutil

    staged = {"source": stage_asset(scratch / "source"), "compiled": stage_asset(scratch / "compiled")}
    compileall.compile_dir(str(staged["compiled"]), quiet=1)
    if C7N_PYTHON.exists():
        site = next((ROOT / "bench" / ".venv-c7n" / "lib").glob("python3*/site-packages"))
        staged["c7n-source"] = scratch / "c7n-source"
        shutil.copytree(
            site / "c7n", staged["c7n-source"] / "c7n", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    return staged


def import_cpu(runs: int) -> dict[str, float]:
    """Median import CPU ms per label (interpreter start subtracted), every label once per round, interleaved.

    Each handler is measured twice: ``<name>`` imports it from the code asset as deployed (source only, compiled on
    import, as Lambda does), ``<name> compiled`` with its bytecode cached. Custodian likewise: ``custodian source``
    (c7n as ``mu`` packages it) and ``custodian`` (c7n from its installed, compiled site-packages). No child writes
    bytecode (``PYTHONDONTWRITEBYTECODE``), so every round measures the same thing.
    """
    with tempfile.TemporaryDirectory(prefix="cold-import-") as scratch:
        staged = stage(Path(scratch))
        plain = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        plain.pop("PYTHONPATH", None)

        def on(path: Path) -> dict[str, str]:
            return {**plain, "PYTHONPATH": str(path)}

        jobs: list[tuple[str, str, str, dict[str, str]]] = [
            ("start", PY, "pass", plain),
            ("baseline", PY, BASELINE, plain),
            ("clients", PY, CLIENTS, plain),
        ]
        if C7N_PYTHON.exists():
            jobs += [
                ("c7n start", str(C7N_PYTHON), "pass", plain),
                ("custodian", str(C7N_PYTHON), CUSTODIAN, plain),
                ("custodian source", str(C7N_PYTHON), CUSTODIAN, on(staged["c7n-source"])),
            ]
        for name in handlers():
            jobs.append((name, PY, f"import governor.{name}.handler", on(staged["source"])))
            jobs.append((f"{name} compiled", PY, f"import governor.{name}.handler", on(staged["compiled"])))
        samples: dict[str, list[float]] = {label: [] for label, _, _, _ in jobs}
        for _ in range(runs):
            for label, python, code, env in jobs:
                samples[label].append(child_cpu_ms(python, code, env, cwd=scratch))
    medians = {label: median(values) for label, values in samples.items()}
    c7n_start = medians.get("c7n start", 0.0)
    out = {
        label: value - (c7n_start if label.startswith("custodian") else medians["start"])
        for label, value in medians.items()
        if label not in ("start", "c7n start")
    }
    out["start_abs"] = medians["start"]
    return out


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
    files = asset_files()
    unzipped, zipped = folder_sizes(ROOT / "lambdas", files)
    return len(files), unzipped, zipped


def layer(target: Path) -> dict[str, tuple[int, int]] | str:
    """Build the layers with ``make layer``'s own code (``infra.build_layer.build``: CPython 3.14 arm64 wheels, pruned
    and verified, one folder per layer of ``infra.dependencies``' plan) into ``target``: each layer's (unzipped,
    zipped) bytes and ``"build seconds"``, or why they were not built."""
    from infra.build_layer import LayerBuildError, build

    began = time.perf_counter()
    out = target / "layer"
    try:
        build(out=out, manifest=target / "layer-manifest.json")
    except LayerBuildError as error:
        return f"not built: {error}"
    sizes: dict[str, tuple[int, int]] = {}
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        sizes[folder.name] = folder_sizes(folder, [f for f in folder.rglob("*") if f.is_file()])
    sizes["build seconds"] = (round(time.perf_counter() - began), 0)
    return sizes


def shipped(sizes: dict[str, tuple[int, int]], asset: tuple[int, int]) -> list[tuple[str, int, int, tuple[str, ...]]]:
    """Each function's code asset plus the layers it attaches (``infra.dependencies.shipped_plan``): what it ships."""
    from infra.dependencies import shipped_plan

    plan = shipped_plan()
    rows = []
    for function, layers in sorted(plan.functions.items()):
        unzipped = asset[0] + sum(sizes[name][0] for name in layers if name in sizes)
        zipped = asset[1] + sum(sizes[name][1] for name in layers if name in sizes)
        rows.append((function, unzipped, zipped, tuple(layers)))
    return rows


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


class _Context:
    """What Powertools reads from the Lambda context (the demo's own class would import the emulator)."""

    memory_limit_in_mb = 512

    def __init__(self, function: str) -> None:
        self.function_name = function
        self.aws_request_id = f"cold-{time.monotonic_ns()}"
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:123456789012:function:governor-{function}"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def _child_invoke(function: str, event_file: str) -> None:
    """Runs in the fresh process: import the handler, invoke it twice, print CPU and wall figures as JSON.

    ``first_send_cpu_ms`` is this process's CPU time (from its start) when its first request to AWS was about to be
    sent, taken by a botocore ``before-send`` hook registered before any Session exists.
    """
    started = time.perf_counter()
    import importlib

    module = importlib.import_module(f"governor.{function}.handler")
    imported = time.perf_counter()
    import_cpu_ms = time.process_time() * 1000
    import botocore.handlers

    marks: dict[str, float] = {}

    def first_send(**_: Any) -> None:
        marks.setdefault("cpu", time.process_time() * 1000)

    botocore.handlers.BUILTIN_HANDLERS.append(("before-send", first_send))
    events = json.loads(Path(event_file).read_text())
    context_ready = time.perf_counter()
    first = module.lambda_handler(events[0], _Context(function))
    invoked = time.perf_counter()
    first_cpu_ms = time.process_time() * 1000
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    module.lambda_handler(events[1], _Context(function))
    second = time.perf_counter()
    print(
        json.dumps(
            {
                "import_ms": (imported - started) * 1000,
                "first_ms": (invoked - context_ready) * 1000,
                "second_ms": (second - invoked) * 1000,
                "import_cpu_ms": import_cpu_ms,
                "first_send_cpu_ms": marks.get("cpu", first_cpu_ms),
                "first_cpu_ms": first_cpu_ms,
                "peak_mib": peak,
                "status": str(first.get("status")) if isinstance(first, dict) else str(type(first)),
            }
        )
    )


def _events(function: str, index: int, setup: dict[str, Any]) -> list[dict[str, Any]]:
    """Two distinct representative events for ``function`` (distinct ids: idempotency would short-cut a repeat)."""
    from governor_cli.testing.events import (  # here, not at the top: the measuring child imports this module
        envelope,
        scheduled,
    )

    events: list[dict[str, Any]] = []
    for n in range(2):
        tag = f"{index}-{n}-{time.monotonic_ns()}"
        if function == "idle":
            events.append(scheduled(event_id=f"cold-{tag}", region=REGION))
        elif function == "spot":
            events.append(
                envelope(
                    "EC2 Spot Instance Interruption Warning",
                    "aws.ec2",
                    {"instance-id": setup["instances"][index * 2 + n], "instance-action": "terminate"},
                    event_id=f"cold-{tag}",
                    region=REGION,
                )
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
    from governor.policy import parse_policy
    from governor_cli.demo.bootstrap import create_shared

    out: dict[str, dict[str, Any]] = {}
    with emulator() as emulated, tempfile.TemporaryDirectory(prefix="cold-") as scratch:
        endpoint = emulated.endpoint
        stack = create_shared(REGION)
        ec2 = boto3.client("ec2", region_name=REGION)
        image = "ami-12c6146b"  # moto accepts any image id
        # One Spot instance per run and event: the Spot function checkpoints an instance once per interruption, so a
        # second warning for the same instance would measure its "duplicate" answer, not the work of a warning.
        instances = [
            i["InstanceId"]
            for i in ec2.run_instances(
                ImageId=image,
                InstanceType="g5.xlarge",
                MinCount=2 * runs,
                MaxCount=2 * runs,
                InstanceMarketOptions={"MarketType": "spot"},
                TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "owner", "Value": "bench"}]}],
            )["Instances"]
        ]
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        group = ec2.create_security_group(GroupName="gpu-training", Description="bench", VpcId=vpc)["GroupId"]
        meta = boto3.client("kms", region_name=REGION).create_key(Description="bench")["KeyMetadata"]
        setup = {"instances": instances, "group": group, "key": (meta["KeyId"], meta["Arn"])}
        policy = parse_policy({})
        code = stage_asset(Path(scratch) / "code")  # the child imports the asset as deployed, compiled on import
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
                    "PYTHONPATH": str(code),
                    "PYTHONDONTWRITEBYTECODE": "1",
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
                    "first_send_cpu_ms": median([s["first_send_cpu_ms"] for s in samples]),
                    "peak_mib": median([s["peak_mib"] for s in samples]),
                    "process_s": median(walls),
                    "status": samples[-1]["status"],
                    "runs": len(samples),
                }
    return out


def measure(runs: int, build_layer: bool, command: str) -> list[Figure]:
    """Every cold-start figure as table rows."""
    section = "2. Cold start and package size"
    rows: list[Figure] = []
    cpu = import_cpu(runs)
    base, custodian = cpu["baseline"], cpu.get("custodian")
    rows.append(Figure(section, f"baseline: {BASELINE} (CPU, median of {runs})", f"{base:.0f} ms", command, "peer"))
    if custodian is not None:
        rows.append(
            Figure(
                section,
                f"Custodian's entry: {CUSTODIAN}, c7n as `mu` deploys it, source only (CPU, median of {runs})",
                f"{cpu['custodian source']:.0f} ms",
                command,
                "peer for the deployed imports",
            )
        )
        rows.append(
            Figure(
                section,
                f"Custodian's entry, c7n bytecode cached (CPU, median of {runs})",
                f"{custodian:.0f} ms",
                command,
                "peer for the cached imports",
            )
        )
    rows.append(
        Figure(
            section,
            f"baseline import + one Session creating 3 clients (CPU, median of {runs})",
            f"{cpu['clients']:.0f} ms",
            command,
            "peer for the first invocation",
        )
    )
    for name in handlers():
        for mode, label, peer in (
            ("deployed", name, "custodian source"),
            ("cached", f"{name} compiled", "custodian"),
        ):
            value = cpu[label]
            verdict = "met" if value <= IMPORT_TARGET * base else "NOT met"
            versus = f"{value / base:.2f}x baseline (target <= {IMPORT_TARGET}x, {verdict})"
            if peer in cpu:
                met = "met" if value <= CUSTODIAN_TARGET * cpu[peer] else "NOT met"
                versus += f", {value / cpu[peer]:.2f}x Custodian (target <= {CUSTODIAN_TARGET}x, {met})"
            what = "as deployed, compiled on import" if mode == "deployed" else "bytecode cached"
            rows.append(
                Figure(
                    section,
                    f"import governor.{name}.handler, {what} (CPU, median of {runs})",
                    f"{value:.0f} ms",
                    command,
                    versus,
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
                f"{function}: fresh process, import + first / second invocation, wall (median of {r['runs']})",
                f"{r['import_ms']:.0f} ms + {r['first_ms']:.0f} ms / {r['second_ms']:.0f} ms",
                command,
                f"lambda_handler on the local emulator, default (report-only) policy; result {r['status']}",
            )
        )
        to_call = r["first_send_cpu_ms"] - cpu["start_abs"]
        met = "met" if to_call <= FIRST_CALL_TARGET * cpu["clients"] else "not met"
        rows.append(
            Figure(
                section,
                f"{function}: import + first invocation to its first AWS request, CPU (median of {r['runs']})",
                f"{to_call:.0f} ms",
                command,
                f"{to_call / cpu['clients']:.2f}x baseline + 3 clients (target <= {FIRST_CALL_TARGET}x, {met})",
            )
        )
    files, unzipped_asset, zipped_asset = code_asset()
    rows.append(
        Figure(
            section,
            f"Lambda code asset (lambdas/, {files} files)",
            f"{human_bytes(zipped_asset)} zipped, {human_bytes(unzipped_asset)} unzipped",
            command,
        )
    )
    if build_layer:
        with tempfile.TemporaryDirectory(prefix="layer-") as scratch:
            built = layer(Path(scratch))
        if isinstance(built, str):
            rows.append(Figure(section, "dependency layers (arm64)", built, command))
        else:
            seconds = built.pop("build seconds")[0]
            for function, unzipped, zipped, layers in shipped(built, (unzipped_asset, zipped_asset)):
                rows.append(
                    Figure(
                        section,
                        f"{function} function: code asset + its layers ({', '.join(layers)})",
                        f"{human_bytes(zipped)} zipped, {human_bytes(unzipped)} unzipped",
                        command,
                        f"layers built like `make layer` in {seconds:.0f}s (Lambda's limit: 250 MB unzipped)",
                    )
                )
    else:
        rows.append(Figure(section, "dependency layers (arm64)", "not built (--no-layer)", command))
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
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--no-layer", action="store_true")
    args = parser.parse_args()
    command = " ".join(["python -m bench.cold_start", *sys.argv[1:]])
    for row in measure(args.runs, not args.no_layer, command):
        print(f"{row.name}: {row.value}" + (f"  ({row.note})" if row.note else ""), flush=True)


if __name__ == "__main__":
    main()
