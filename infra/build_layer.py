"""Build the Lambda dependency layer for arm64 without Docker, then drop what the Lambda runtime already provides.

``aws-lambda-powertools[tracer]`` pulls in ``aws-xray-sdk``, which pulls in ``botocore`` but not ``boto3``. Layer
paths come before the runtime's own packages, so shipping that botocore would make the runtime's boto3 run on a
botocore it was not released with. The Python runtime provides boto3, botocore and s3transfer as a matched set;
the layer keeps none of them (AWS's Powertools layer does the same).

Run through ``make layer`` (cdk.json's ``build`` hook): ``python3 -m infra.build_layer``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Distributions the Lambda Python runtime ships as a matched set; the layer must not shadow one of them.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
PIP_TARGET = ("--platform", "manylinux2014_aarch64", "--implementation", "cp", "--python-version", "3.14")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def prune(site: Path, names: tuple[str, ...] = RUNTIME_PROVIDED) -> list[str]:
    """Remove the packages and ``.dist-info`` folders of ``names`` from ``site``; returns what was removed."""
    wanted = {_normalized(name) for name in names}
    removed: list[str] = []
    for entry in sorted(site.iterdir()):
        stem = entry.name
        if stem.endswith(".dist-info"):
            stem = stem[: -len(".dist-info")].rsplit("-", 1)[0]
        if _normalized(stem) in wanted:
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry.name)
    return removed


def build(requirements: Path, out: Path) -> list[str]:
    """``pip install`` the pinned runtime requirements for manylinux2014_aarch64 into ``out/python``, then prune."""
    if out.exists():
        shutil.rmtree(out)
    site = out / "python"
    site.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "install", "-q", *PIP_TARGET, "--only-binary=:all:", "--target", str(site)]
    subprocess.run([*command, "-r", str(requirements)], check=True)
    return prune(site)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requirements", type=Path, default=ROOT / "lambdas" / "requirements.txt")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "layer")
    args = parser.parse_args(argv)
    removed = build(args.requirements, args.out)
    print(f"layer built in {args.out}; left to the Lambda runtime: {', '.join(removed) or 'nothing to remove'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
