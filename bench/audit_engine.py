"""Local audit over synthetic CloudTrail: all library queries on N records spread over 30 days.

Prints: generation time (not counted), for a 30-day and a 1-day range the files opened / pruned, records loaded, load
time, total query time, the slowest queries, and each run's peak RSS (each measured in a fresh child process); and the
peer: one raw DuckDB ``read_json`` scan of the same files (the schema auto-detected, every record unnested and
counted) in a fresh process. The target compares CPU time (user + system, all DuckDB threads) and peak RSS of all 20
queries over the 30-day range (load included) with that raw scan's; ``--runs`` fresh processes each, medians.

    .venv/bin/python -m bench.audit_engine                    # 1,000,000 records
    .venv/bin/python -m bench.audit_engine --records 50000    # a quick run
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ACCOUNT = "111122223333"
REGION = "us-east-1"
START = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
DAYS = 30
FILE_MINUTES = 5
USERS = [f"arn:aws:iam::{ACCOUNT}:user/user{i}" for i in range(40)]
GPU_TYPES = ["g5.xlarge", "g5.12xlarge", "p4d.24xlarge", "p5.48xlarge", "trn1.32xlarge", "inf2.xlarge", "g6e.xlarge"]


def _record(rng: random.Random, n: int, at: dt.datetime) -> dict[str, Any]:
    """A plausible mix: mostly reads, some launches/stops, security group changes, sign-ins, denied calls."""
    roll = rng.random()
    user = rng.choice(USERS)
    base: dict[str, Any] = {
        "eventVersion": "1.09",
        "userIdentity": {"type": "IAMUser", "principalId": f"AIDA{n % 997}", "arn": user, "accountId": ACCOUNT},
        "eventTime": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "eventSource": "ec2.amazonaws.com",
        "eventName": "DescribeInstances",
        "awsRegion": REGION,
        "sourceIPAddress": f"198.51.100.{n % 250}",
        "userAgent": "aws-cli/2.15.0 Python/3.11",
        "requestParameters": {"maxResults": 1000, "filterSet": {"items": [{"name": "instance-type", "valueSet": {}}]}},
        "responseElements": None,
        "requestID": f"r-{n:010d}",
        "eventID": f"00000000-0000-4000-8000-{n:012d}",
        "readOnly": True,
        "eventType": "AwsApiCall",
        "managementEvent": True,
        "recipientAccountId": ACCOUNT,
        "eventCategory": "Management",
        "tlsDetails": {
            "tlsVersion": "TLSv1.3",
            "cipherSuite": "TLS_AES_128_GCM_SHA256",
            "clientProvidedHostHeader": "ec2",
        },
    }
    if roll < 0.01:
        kind = rng.choice([*GPU_TYPES, "t3.micro", "m7i.large"])
        ids = [f"i-{n:017x}"]
        base.update(
            eventName="RunInstances",
            readOnly=False,
            requestParameters={
                "instanceType": kind,
                "instancesSet": {"items": [{"imageId": "ami-1", "minCount": 1, "maxCount": 1}]},
            },
            responseElements={"instancesSet": {"items": [{"instanceId": i, "instanceType": kind} for i in ids]}},
        )
        if rng.random() < 0.1:
            base.update(
                errorCode="Client.InsufficientInstanceCapacity", errorMessage="no capacity", responseElements=None
            )
    elif roll < 0.02:
        name = rng.choice(["StopInstances", "StartInstances", "TerminateInstances"])
        items = {"instancesSet": {"items": [{"instanceId": f"i-{rng.randrange(n + 1):017x}"}]}}
        base.update(eventName=name, readOnly=False, requestParameters=items, responseElements=items)
    elif roll < 0.025:
        cidr = rng.choice(["0.0.0.0/0", "10.0.0.0/8", "::/0", "192.0.2.0/24"])
        key, ranges = ("cidrIpv6", "ipv6Ranges") if ":" in cidr else ("cidrIp", "ipRanges")
        perm = {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, ranges: {"items": [{key: cidr}]}}
        base.update(
            eventName="AuthorizeSecurityGroupIngress",
            readOnly=False,
            requestParameters={"groupId": f"sg-{n % 50:08x}", "ipPermissions": {"items": [perm]}},
        )
    elif roll < 0.03:
        base.update(
            eventSource="signin.amazonaws.com",
            eventName="ConsoleLogin",
            eventType="AwsConsoleSignIn",
            requestParameters=None,
            responseElements={"ConsoleLogin": "Success" if rng.random() < 0.9 else "Failure"},
            additionalEventData={"MFAUsed": rng.choice(["Yes", "No"]), "LoginTo": "https://console.aws.amazon.com"},
        )
    elif roll < 0.06:
        base.update(errorCode="Client.UnauthorizedOperation", errorMessage="You are not authorized")
    elif roll < 0.065:
        base.update(
            eventSource="iam.amazonaws.com",
            eventName=rng.choice(["PutRolePolicy", "AttachRolePolicy", "CreateAccessKey", "DeleteAccessKey"]),
            readOnly=False,
            requestParameters={"roleName": "r", "userName": "u", "policyArn": "arn:aws:iam::aws:policy/ReadOnlyAccess"},
        )
    return base


def generate(folder: Path, records: int, seed: int = 7) -> int:
    """Write ``records`` events over 30 days, one ``.json.gz`` per 5 minutes in the AWSLogs layout; returns files."""
    rng = random.Random(seed)
    slots = DAYS * 24 * 60 // FILE_MINUTES
    per_file, extra = divmod(records, slots)
    n = 0
    for slot in range(slots):
        began = START + dt.timedelta(minutes=slot * FILE_MINUTES)
        count = per_file + (1 if slot < extra else 0)
        batch = [
            _record(rng, n + i, began + dt.timedelta(seconds=rng.randrange(FILE_MINUTES * 60))) for i in range(count)
        ]
        n += count
        delivered = began + dt.timedelta(minutes=FILE_MINUTES + 5)  # key date = delivery date (may be the next day)
        day = delivered.strftime("%Y/%m/%d")
        target = folder / "AWSLogs" / ACCOUNT / "CloudTrail" / REGION / day
        target.mkdir(parents=True, exist_ok=True)
        name = f"{ACCOUNT}_CloudTrail_{REGION}_{delivered:%Y%m%dT%H%MZ}_{slot:06d}.json.gz"
        (target / name).write_bytes(gzip.compress(json.dumps({"Records": batch}).encode(), compresslevel=1))
    return slots


def _cpu() -> float:
    """CPU seconds of this process (all DuckDB threads): stable when other work shares the machine."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(folder: Path, start: str | None, end: str | None) -> dict[str, Any]:
    """One audit run (in this process): timings, files and peak RSS."""
    from governor.audit.engine import LocalLake, discover, in_window, used_columns, used_fields
    from governor.audit.queries import iso, list_queries, parse_time

    began = time.perf_counter()
    cpu_began = _cpu()
    first = parse_time(start) if start else None
    last = parse_time(end) if end else None
    files = discover(folder)
    wanted = [f for f in files if in_window(f, first, last)]
    specs = list_queries()
    lake = LocalLake(used_columns(specs), fields=used_fields(specs))
    lake.load(wanted)
    loaded = time.perf_counter()
    cpu_loaded = _cpu()
    span = lake.time_span()
    assert span is not None
    parameters = {"start": iso(first or span[0]), "end": iso(last or span[1] + dt.timedelta(seconds=1))}
    seconds: dict[str, float] = {}
    rows: dict[str, int] = {}
    for spec in specs:
        t0 = time.perf_counter()
        rows[spec.name] = lake.run(spec, parameters)["count"]
        seconds[spec.name] = time.perf_counter() - t0
    done = time.perf_counter()
    return {
        "files_total": len(files),
        "files_opened": len(lake.opened),
        "files_skipped": len(lake.skipped),
        "records": lake.record_count(),
        "load_seconds": loaded - began,
        "query_seconds": done - loaded,
        "total_seconds": done - began,
        "load_cpu_seconds": cpu_loaded - cpu_began,
        "query_cpu_seconds": _cpu() - cpu_loaded,
        "slowest": sorted(seconds.items(), key=lambda kv: -kv[1])[:3],
        "rows": rows,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def raw_scan(folder: Path) -> dict[str, Any]:
    """The peer: one plain DuckDB ``read_json`` over the same files, every record unnested and counted."""
    import duckdb

    from governor.audit.engine import MAX_FILE_BYTES, discover

    began = time.perf_counter()
    cpu_began = _cpu()
    names = [str(f.path) for f in discover(folder)]
    con = duckdb.connect(":memory:")
    relation = con.read_json(names, format="auto", maximum_object_size=MAX_FILE_BYTES)  # type: ignore[arg-type]
    con.register("raw", relation)
    row = con.execute("SELECT count(*) FROM (SELECT unnest(Records) FROM raw)").fetchone()
    return {
        "records": int(row[0]) if row else 0,
        "total_seconds": time.perf_counter() - began,
        "cpu_seconds": _cpu() - cpu_began,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _child(folder: Path, start: str | None, end: str | None, raw: bool = False) -> dict[str, Any]:
    args = [sys.executable, "-m", "bench.audit_engine", "--measure", str(folder)]
    if start and end:
        args += ["--start", start, "--end", end]
    if raw:
        args += ["--raw"]
    output = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--out", help="keep the generated tree here (reused when it exists)")
    parser.add_argument("--runs", type=int, default=1, help="fresh processes per figure (medians)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start", help=argparse.SUPPRESS)
    parser.add_argument("--end", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        result = raw_scan(Path(args.measure)) if args.raw else measure(Path(args.measure), args.start, args.end)
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as scratch:
        folder = Path(args.out) if args.out else Path(scratch)
        if not (folder / "AWSLogs").exists():
            t0 = time.perf_counter()
            files = generate(folder, args.records)
            size = sum(p.stat().st_size for p in folder.rglob("*.gz")) / 1024**2
            print(
                f"generated {args.records:,} records in {files:,} files ({size:,.0f} MiB gzip) in {time.perf_counter() - t0:.1f}s"
            )
        one_day_start = (START + dt.timedelta(days=14)).strftime("%Y-%m-%dT%H:%M:%SZ")
        one_day_end = (START + dt.timedelta(days=15)).strftime("%Y-%m-%dT%H:%M:%SZ")
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} before the runs")
        for line in report(folder, args.runs, one_day_start, one_day_end):
            print(line)


def _median_run(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median CPU (its other figures with it), and the median peak RSS."""
    key = "cpu_seconds" if "cpu_seconds" in samples[0] else "load_cpu_seconds"
    ordered = sorted(samples, key=lambda r: r[key] + r.get("query_cpu_seconds", 0.0))
    chosen = dict(ordered[len(ordered) // 2])
    chosen["peak_rss_mib"] = sorted(r["peak_rss_mib"] for r in samples)[len(samples) // 2]
    return chosen


def report(folder: Path, runs: int, one_day_start: str, one_day_end: str) -> list[str]:
    """Every figure as a printed line; each kind of run ``runs`` times, interleaved, in fresh processes."""
    samples: dict[str, list[dict[str, Any]]] = {"raw": [], "30-day range": [], "1-day range": []}
    for _ in range(max(1, runs)):
        samples["raw"].append(_child(folder, None, None, raw=True))
        samples["30-day range"].append(_child(folder, None, None))
        samples["1-day range"].append(_child(folder, one_day_start, one_day_end))
    raw = _median_run(samples["raw"])
    lines = [
        f"raw DuckDB read_json scan: {raw['records']:,} records, CPU {raw['cpu_seconds']:.1f}s, "
        f"{raw['total_seconds']:.1f}s wall, peak RSS {raw['peak_rss_mib']:,.0f} MiB (median of {runs})"
    ]
    for label in ("30-day range", "1-day range"):
        r = _median_run(samples[label])
        cpu = r["load_cpu_seconds"] + r["query_cpu_seconds"]
        slow = ", ".join(f"{name} {sec:.2f}s" for name, sec in r["slowest"])
        lines.append(
            f"{label}: opened {r['files_opened']:,} of {r['files_total']:,} files, {r['records']:,} records; "
            f"load {r['load_seconds']:.1f}s, all {len(r['rows'])} queries {r['query_seconds']:.1f}s, "
            f"total {r['total_seconds']:.1f}s wall; CPU load {r['load_cpu_seconds']:.1f}s + "
            f"queries {r['query_cpu_seconds']:.1f}s; peak RSS {r['peak_rss_mib']:,.0f} MiB (median of {runs})"
        )
        lines.append(
            f"  vs raw scan: CPU {cpu / raw['cpu_seconds']:.2f}x (target <= 2x), "
            f"peak RSS {r['peak_rss_mib'] / raw['peak_rss_mib']:.2f}x (target <= 2x)"
        )
        lines.append(f"  slowest: {slow}")
        lines.append(
            f"  rows: gpu_instance_launches={r['rows']['gpu_instance_launches']:,}, "
            f"world_open_ingress={r['rows']['world_open_ingress']:,}, "
            f"gpu_instance_hours={r['rows']['gpu_instance_hours']:,}"
        )
    return lines


if __name__ == "__main__":
    main()
