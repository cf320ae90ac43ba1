"""Measure what each function's typical invocation is billed for, on the emulator, and write the model
``governor cost`` and the report price (``lambdas/governor/footprint/measured.py``).

    .venv/bin/python -m governor_cli.cost.measure [--sizes 8 24] [--write]

Every function runs through its real ``lambda_handler`` on moto (``governor_cli.testing.deployment``: the shared
tables, bus and queues the stack creates, each function's environment) under the shipped policy (governor.yaml),
with a :class:`~governor_cli.cost.meter.Meter` around botocore. What runs:

* the idle sweep over two all-busy fleets (``--sizes``; the second sweep of each, when nothing changes any more):
  a fixed part and a part per instance, fitted on the two sizes;
* the idle sweep over the smaller fleet with ``--idle`` of its instances idle, five sweeps 15 minutes apart: what an
  idle instance adds to every sweep once warned, and what one idle episode (warning, then the report-only "would
  stop") adds once; every finding those sweeps publish is delivered to the notifier and to the Security Hub export;
* the daily and weekly report over that ledger, the daily sweeps (network, keys, lifecycle reconcile) on both
  fleets, and the event-driven invocations one GPU instance's life brings (RunInstances to lifecycle and network,
  its state changes to lifecycle and Spot) and one Spot interruption warning;
* each function's import CPU in a fresh interpreter (its cold start), and the gzip size of a CloudTrail event (the
  project's copy of the Invictus dataset: what Athena scans per event of the trail).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from governor_cli.cost.meter import Meter

ROOT = Path(__file__).resolve().parents[3]
MODEL_FILE = ROOT / "lambdas" / "governor" / "footprint" / "measured.py"
CLOUDTRAIL_SAMPLE = ROOT / "tests" / "fixtures" / "cloudtrail" / "invictus-aws-dataset"
DEFAULT_SIZES = (8, 24)
DEFAULT_IDLE = 2
EPISODE_SWEEPS = 5
STEADY_SWEEPS = 2
#: Minutes of metrics before the first sweep (the shipped window, 120 min, plus one interval) and after it.
METRICS_BEFORE = 150
METRICS_AFTER = 15 * EPISODE_SWEEPS + 15
BUSY = {"nvidia_smi_utilization_gpu": 80.0, "nvidia_smi_memory_used": 12_288.0, "nvidia_smi_power_draw": 250.0}
IDLE = {"nvidia_smi_utilization_gpu": 0.3, "nvidia_smi_memory_used": 12_288.0, "nvidia_smi_power_draw": 25.0}
FLEET_TAGS = {"owner": "alice@example.com", "team": "vision", "gpu-fleet": "true"}
Units = dict[str, float]


def _policy() -> Any:
    from governor.policy import resolve_policy

    policy, _ = resolve_policy(str(ROOT / "governor.yaml"))
    return policy


@contextmanager
def world(meter: Meter) -> Iterator[Any]:
    """A fresh emulator with the stack's shared resources and every function's environment (metrics on, as
    deployed: the EMF lines are logged and billed)."""
    from moto import mock_aws

    from governor_cli.testing.deployment import Deployment
    from governor_cli.testing.faults import fake_slack

    class Measured(Deployment):
        def environment(self, function: str) -> dict[str, str]:
            return {**super().environment(function), "POWERTOOLS_METRICS_DISABLED": "false"}

    from governor.adapters.aws import client

    with mock_aws(), fake_slack(), meter.installed():
        client.cache_clear()
        deployment = Measured(_policy())
        try:
            yield deployment
        finally:
            deployment.close()
    client.cache_clear()


def launch(count: int, *, idle: int = 0, now: dt.datetime) -> list[str]:
    """``count`` tagged GPU instances, the first ``idle`` of them idle, with one-minute agent metrics around ``now``."""
    from governor.adapters.aws import client
    from governor_cli.testing.deployment import REGION, image_id

    ec2 = client("ec2", REGION)
    tags = [{"Key": k, "Value": v} for k, v in FLEET_TAGS.items()]
    found = ec2.run_instances(
        ImageId=image_id(),
        InstanceType="g5.xlarge",
        MinCount=count,
        MaxCount=count,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    ids = [str(i["InstanceId"]) for i in found["Instances"]]
    cloudwatch = client("cloudwatch", REGION)
    for number, instance in enumerate(ids):
        for name, value in (IDLE if number < idle else BUSY).items():
            data = [
                {
                    "MetricName": name,
                    "Dimensions": [{"Name": "InstanceId", "Value": instance}],
                    "Timestamp": now + dt.timedelta(minutes=minute),
                    "Value": value,
                }
                for minute in range(-METRICS_BEFORE, METRICS_AFTER)
            ]
            for start in range(0, len(data), 1000):
                cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=data[start : start + 1000])
    return ids


def invoke(meter: Meter, deployment: Any, function: str, event: dict[str, Any]) -> Units:
    """One invocation through the function's ``lambda_handler``; its units."""
    meter.reset()
    with meter.counting():
        deployment.invoke(function, event)
    return dict(meter.units)


def sweeps(meter: Meter, deployment: Any, first: dt.datetime, count: int) -> list[Units]:
    """``count`` idle sweeps 15 minutes apart on the simulated clock; each sweep's units and what it published."""
    from governor_cli.testing.events import scheduled
    from governor_cli.testing.idle_clock import clocked_idle

    clock = [first]
    found: list[Units] = []
    published: list[dict[str, Any]] = []
    with clocked_idle(lambda: clock[0]):
        for number in range(count):
            clock[0] = first + dt.timedelta(minutes=15 * number)
            found.append(invoke(meter, deployment, "idle", scheduled(time=clock[0])))
            published += meter.published
    meter.published[:] = published
    return found


def _start() -> dt.datetime:
    """The simulated now: past every instance's launch grace (the emulator launches them at the real now)."""
    return dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(hours=3)


def daily_sweeps(meter: Meter, deployment: Any, at: dt.datetime) -> dict[str, Units]:
    """The once-a-day sweeps: network drift, keys, lifecycle reconcile."""
    from governor_cli.testing.events import scheduled

    return {
        "network.DriftSweep": invoke(meter, deployment, "network", scheduled(time=at)),
        "keys.Sweep": invoke(meter, deployment, "keys", scheduled(time=at)),
        "lifecycle.Reconcile": invoke(meter, deployment, "lifecycle", scheduled(time=at)),
    }


#: What one GPU instance's life sends each rule-triggered function: its RunInstances call (lifecycle and network both
#: take it) and its state changes while it runs and ends (running, shutting-down, terminated), each function taking
#: those its rule matches (``governor.lifecycle.domain``: running and the closing states; Spot: the final ones).
LIFE = ("running", "shutting-down", "terminated")


def instance_life(meter: Meter, deployment: Any) -> tuple[dict[str, Units], dict[str, float]]:
    """Each rule trigger's units per event, and how many events one instance's life sends it."""
    from governor.lifecycle.domain import CLOSING_STATES, RUNNING
    from governor.spot.domain import FINAL_STATES
    from governor_cli.testing.events import envelope
    from governor_cli.testing.scenarios import Scenarios, cloudtrail_call

    scenarios = Scenarios(seed=11)
    instance = scenarios.instance("g5.xlarge")
    response = {"instancesSet": {"items": [{"instanceId": instance, "instanceType": "g5.xlarge"}]}}
    call = cloudtrail_call("aws.ec2", "RunInstances", {"instanceType": "g5.xlarge"}, response)

    def changed(state: str) -> dict[str, Any]:
        return envelope("EC2 Instance State-change Notification", "aws.ec2", {"instance-id": instance, "state": state})

    lifecycle_states = [s for s in LIFE if s == RUNNING or s in CLOSING_STATES]
    spot_states = [s for s in LIFE if s in FINAL_STATES]
    runs = {
        "lifecycle.RunInstances": [invoke(meter, deployment, "lifecycle", call)],
        "network.CloudTrailCalls": [invoke(meter, deployment, "network", call)],
        "lifecycle.StateChange": [invoke(meter, deployment, "lifecycle", changed(s)) for s in lifecycle_states],
        "spot.StateChange": [invoke(meter, deployment, "spot", changed(s)) for s in spot_states],
        "spot.Interruption": [invoke(meter, deployment, "spot", scenarios.build("spot_warning", 0).event)],
    }
    per_event = {key: scaled(total(found), 1 / len(found)) for key, found in runs.items()}
    per_life = {key: float(len(found)) for key, found in runs.items() if key != "spot.Interruption"}
    return per_event, per_life


def total(runs: list[Units]) -> Units:
    summed: Counter[str] = Counter()
    for run in runs:
        summed.update({k: v for k, v in run.items() if not k.startswith("_")})
    return dict(summed)


def scaled(units: Mapping[str, float], factor: float) -> Units:
    return {k: v * factor for k, v in units.items() if not k.startswith("_")}


def minus(a: Mapping[str, float], b: Mapping[str, float]) -> Units:
    return {k: a.get(k, 0.0) - b.get(k, 0.0) for k in set(a) | set(b) if not k.startswith("_")}


def fit(small: Units, large: Units, sizes: tuple[int, int]) -> dict[str, Units]:
    """A fixed part and a part per instance from the same invocation at two fleet sizes (least squares of a line
    through two points: exact); a negative fixed part (rounding of batch sizes) is kept at zero."""
    span = sizes[1] - sizes[0]
    per = {k: max(0.0, v / span) for k, v in minus(large, small).items()}  # noise (CPU) never makes size cheaper
    fixed = {k: max(0.0, small.get(k, 0.0) - per[k] * sizes[0]) for k in per}
    return {"fixed": _clean(fixed), "per_instance": _clean(per)}


def _clean(units: Mapping[str, float]) -> Units:
    return {k: round(v, 6) for k, v in sorted(units.items()) if abs(v) > 1e-9}


def busy_fleet(size: int, life: bool) -> dict[str, Any]:
    """An all-busy fleet of ``size``: its steady sweep, its daily sweeps and (with ``life``) one instance's life."""
    meter = Meter()
    with world(meter) as deployment:
        now = _start()
        launch(size, now=now)
        steady = sweeps(meter, deployment, now, STEADY_SWEEPS)[-1]
        found: dict[str, Any] = {
            "idle.Sweep": steady,
            **daily_sweeps(meter, deployment, now + dt.timedelta(minutes=40)),
        }
        if life:
            found["_life"] = instance_life(meter, deployment)
        found["_emf"] = set(meter.metric_names)
    return found


def idle_episode(size: int, idle: int) -> dict[str, Any]:
    """``size`` instances, ``idle`` of them idle: five sweeps (warned, then report-only "would stop"), every finding
    delivered to the notifier and the Security Hub export, then the daily and weekly report."""
    from governor_cli.testing.events import finding, scheduled

    meter = Meter()
    with world(meter) as deployment:
        now = _start()
        launch(size, idle=idle, now=now)
        runs = sweeps(meter, deployment, now, EPISODE_SWEEPS)
        bodies = [json.loads(entry["Detail"]) for entry in meter.published]
        notified = [invoke(meter, deployment, "notifier", finding(body)) for body in bodies]
        exported = [invoke(meter, deployment, "securityhub", finding(body)) for body in bodies]
        later = now + dt.timedelta(days=1)
        reports = {
            f"report.{kind.capitalize()}": invoke(meter, deployment, "report", scheduled({"kind": kind}, time=later))
            for kind in ("daily", "weekly")
        }
        emf = set(meter.metric_names)
    return {
        "sweeps": runs,
        "findings": bodies,
        "notified": notified,
        "exported": exported,
        "reports": reports,
        "emf": emf,
    }


def import_cpu(function: str) -> float:
    """CPU seconds a fresh interpreter spends importing the function's handler, less the interpreter's own start."""

    def cpu(code: str) -> float:
        script = (
            f"import resource\n{code}\nu = resource.getrusage(resource.RUSAGE_SELF)\nprint(u.ru_utime + u.ru_stime)"
        )
        env = {"PYTHONPATH": f"{ROOT / 'lambdas'}", "PATH": "/usr/bin:/bin"}
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
        return float(out.stdout.strip())

    return max(0.0, cpu(f"import governor.{function}.handler") - cpu("pass"))


def memory_of(function: str) -> int:
    """The function's memory as its construct sets it (``CapabilityConstruct.MEMORY_MB``)."""
    from importlib import import_module

    from governor.registry import REGISTRY

    module, _, name = REGISTRY[function].construct.partition(":")
    return int(getattr(import_module(module), name).MEMORY_MB)


def cloudtrail_event_bytes(folder: Path = CLOUDTRAIL_SAMPLE) -> float:
    """Gzip bytes per event of real CloudTrail log files, as delivered (one gzip object per file)."""
    events = compressed = 0
    for path in sorted(folder.glob("*.json")):
        raw = path.read_bytes()
        events += len(json.loads(raw).get("Records", []))
        compressed += len(gzip.compress(raw))
    return compressed / max(1, events)


def fitted(
    small: dict[str, Any], large: dict[str, Any], episode: dict[str, Any], sizes: tuple[int, int], idle: int
) -> dict[str, Any]:
    """Each trigger's units (``<function>.<trigger id>``): fixed, per instance swept, per idle instance, per episode."""
    runs = episode["sweeps"]
    invocations: dict[str, Any] = {"idle.Sweep": fit(small["idle.Sweep"], large["idle.Sweep"], sizes)}
    invocations["idle.Sweep"]["per_idle_instance"] = _clean(scaled(minus(runs[-1], small["idle.Sweep"]), 1 / idle))
    invocations["idle.Sweep"]["per_episode"] = _clean(scaled(minus(total(runs), scaled(runs[-1], len(runs))), 1 / idle))
    for name in ("network.DriftSweep", "keys.Sweep", "lifecycle.Reconcile"):
        invocations[name] = fit(small[name], large[name], sizes)
    per_event, _ = small["_life"]
    invocations.update({key: {"fixed": _clean(units)} for key, units in per_event.items()})
    found = max(1, len(episode["findings"]))
    invocations["notifier.Findings"] = {"fixed": _clean(scaled(total(episode["notified"]), 1 / found))}
    invocations["securityhub.Findings"] = {"fixed": _clean(scaled(total(episode["exported"]), 1 / found))}
    invocations.update({key: {"fixed": _clean(units)} for key, units in episode["reports"].items()})
    return invocations


def report_windows() -> dict[str, dict[str, float]]:
    """Days of each ledger kind a report reads (``governor.report.handler.ledger_items``): decisions since the previous
    period's start, the other kinds from a lookback further back."""
    from governor.report.handler import LEDGER_KINDS, LEDGER_LOOKBACK

    windows: dict[str, dict[str, float]] = {}
    for key, days in (("report.Daily", 1), ("report.Weekly", 7)):
        windows[key] = {kind: 2 * days + (0 if kind == "decision" else LEDGER_LOOKBACK.days) for kind in LEDGER_KINDS}
    return windows


def athena() -> dict[str, Any]:
    """The report's audit queries: how many the stack deploys, and the day partitions each reads (the period's days
    and the day after, the delivery date's slack: ``queries/*.sql``)."""
    from governor.audit.queries import list_queries

    return {"queries": len(list_queries()), "scan_days": {"report.Daily": 2, "report.Weekly": 8}}


def stack_resources() -> dict[str, float]:
    """Resources billed by the month, counted in the stack synthesized from the shipped policy."""
    import tempfile

    from infra.app_builder import build_app

    with tempfile.TemporaryDirectory() as outdir:
        app, stack = build_app(outdir=outdir)
        template = app.synth().get_stack_by_name(stack.stack_name).template
        retention = stack.settings.log_retention_days
    kinds = Counter(resource["Type"] for resource in template["Resources"].values())
    return {
        "alarms": float(kinds["AWS::CloudWatch::Alarm"]),
        "dashboards": float(kinds["AWS::CloudWatch::Dashboard"]),
        "kms_keys": float(kinds["AWS::KMS::Key"]),
        "log_retention_days": float(retention),
    }


def model(sizes: tuple[int, int], idle: int, command: str, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every scenario and fit the model (see the module docstring)."""
    from governor.registry import REGISTRY

    small, large = busy_fleet(sizes[0], life=True), busy_fleet(sizes[1], life=False)
    log(f"busy fleets of {sizes[0]} and {sizes[1]} measured")
    episode = idle_episode(sizes[0], idle)
    log(f"idle episode on {sizes[0]} instances ({idle} idle) measured")
    functions = {
        name: {"memory_mb": memory_of(name), "init_cpu_seconds": round(import_cpu(name), 3)} for name in REGISTRY
    }
    resources = stack_resources()
    log("cold starts and the stack's resources measured")
    _, per_life = small["_life"]
    return {
        "schema": 1,
        "measured": {
            "command": command,
            "date": dt.date.today().isoformat(),
            "commit": _commit(),
            "sizes": list(sizes),
            "idle": idle,
            "episode_sweeps": EPISODE_SWEEPS,
            "policy": "governor.yaml as shipped",
            "emulator": f"moto {_version('moto')}",
        },
        "functions": functions,
        "invocations": fitted(small, large, episode, sizes, idle),
        "per_launch": per_life,
        "per_interruption": {"spot.Interruption": 1.0},
        "findings_per_episode": round(len(episode["findings"]) / idle, 3),
        "report_windows": report_windows(),
        "athena": athena(),
        "resources": resources,
        "custom_metrics": sorted(episode["emf"] | small["_emf"] | large["_emf"]),
        "cloudtrail_gzip_bytes_per_event": round(cloudtrail_event_bytes(), 1),
    }


def module_text(model_json: str) -> str:
    """The model as the runtime module it ships in (the Lambda asset holds Python only): the JSON, verbatim."""
    header = (
        '"""The measured model of the governor\'s invocations (``governor.footprint.usage`` reads it).\n\n'
        "Generated by ``python -m governor_cli.cost.measure --write`` (its ``measured`` entry says when, at which "
        "commit,\nwith which command); do not edit: tests/adapters/test_cost_model.py measures again and compares.\n"
        '"""\n\nfrom __future__ import annotations\n\nimport json\nfrom typing import Any\n\n'
    )
    if '"""' in model_json or "\\" in model_json:
        raise ValueError("the model's JSON would not survive a triple-quoted string")
    return header + 'MODEL: dict[str, Any] = json.loads(\n    """\n' + model_json + '"""\n)\n'


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=list(DEFAULT_SIZES), metavar=("SMALL", "LARGE"))
    parser.add_argument("--idle", type=int, default=DEFAULT_IDLE, help="idle instances in the episode run")
    parser.add_argument("--write", action="store_true", help=f"write the model to {MODEL_FILE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    small, large = sorted(args.sizes)
    if small == large or args.idle < 1 or args.idle >= small:
        parser.error("two different sizes, and 1 <= --idle < the smaller size")
    command = "python -m governor_cli.cost.measure " + " ".join(argv if argv is not None else sys.argv[1:])
    found = model((small, large), args.idle, command.strip(), log=lambda line: print(line, file=sys.stderr))
    text = json.dumps(found, indent=1, sort_keys=True) + "\n"
    if args.write:
        MODEL_FILE.write_text(module_text(text), encoding="utf-8")
        print(f"wrote {MODEL_FILE.relative_to(ROOT)}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
