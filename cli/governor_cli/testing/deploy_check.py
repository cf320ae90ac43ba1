"""Run the deploy commands the docs tell a user to run, verbatim, with the real CDK CLI, against the local emulator.

``make deploy-check`` and ``make deploy-local`` (CI runs both after ``make test``). The commands are read from the
docs themselves: every fenced ``bash`` block that follows a ``<!-- deploy-check -->`` line in README.md,
docs/deploy.md or docs/organization.md is run line by line through bash, exactly as written, so the docs and CI
cannot drift apart. They run against moto's server on the loopback interface (``governor_cli.testing.local_aws``):
``cdk bootstrap`` creates the bootstrap stack there, ``cdk deploy`` publishes the assets (the real layer, built by
cdk.json's build hook) and executes the change set, ``cdk destroy`` removes the stack.

On top of the documented commands, settings AWS would refuse must stop the synth with one line naming the setting
(``MUST_FAIL``). ``deploy-local`` is the short path: bootstrap, deploy one region, list the resource types the
emulator skipped, ``governor status`` on the deployed stack (healthy, exit 0), then one message on one of its
dead-letter queues and ``governor status`` again (degraded, exit 1, naming the queue).

    python -m governor_cli.testing.deploy_check check | local
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCS = ("README.md", "docs/deploy.md", "docs/organization.md")
MARKER = "<!-- deploy-check -->"
REGION = "us-east-1"
STACK = "GpuFleetGovernor"


@dataclass(frozen=True)
class Command:
    source: str  # file:line
    text: str


def documented_commands(root: Path = ROOT, docs: tuple[str, ...] = DOCS) -> list[Command]:
    """Every command of every marked ``bash`` block, continuation lines joined, in document order."""
    commands: list[Command] = []
    for doc in docs:
        lines = (root / doc).read_text(encoding="utf-8").splitlines()
        index = 0
        while index < len(lines):
            if lines[index].strip() == MARKER:
                fence = index + 1
                if fence >= len(lines) or not lines[fence].strip().startswith("```bash"):
                    raise ValueError(f"{doc}:{index + 1}: {MARKER} must stand right before a ```bash block")
                index = fence + 1
                pending, start = "", index
                while not lines[index].strip().startswith("```"):
                    line = lines[index]
                    if not pending:
                        start = index
                    if line.rstrip().endswith("\\"):
                        pending += line.rstrip()[:-1] + " "
                    else:
                        text = (pending + line).strip()
                        pending = ""
                        if text and not text.startswith("#"):
                            commands.append(Command(f"{doc}:{start + 1}", text))
                    index += 1
            index += 1
    return commands


#: Settings AWS would refuse at deploy time (or that cannot serve at run time): the synth must stop, in one line
#: naming the setting, before anything is deployed.
MUST_FAIL: dict[str, str] = {
    "npx cdk synth -c account=111122223333 -c region=ap-southeast-2 -c stack_name=GpuFleetGovernorResearchPlatf"
    "ormA1B2C3D4": "context stack_name",
    "npx cdk synth -c account=111122223333 -c region=us-east-1 -c layer=public": "context layer",
    "npx cdk synth -c account=111122223333 -c region=us-east-1 -c layer=auto": "context layer",
}


def _run(text: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``text`` through bash on a pseudo-terminal (``script``), answering "y" as a user at ``cdk deploy``'s
    security-change prompt and ``cdk destroy``'s confirmation would: the CLI refuses both without a terminal."""
    shell = f"bash -o pipefail -c {shlex.quote(text)}"
    return subprocess.run(
        ["script", "-qefc", shell, "/dev/null"], cwd=ROOT, env=env, capture_output=True, text=True, input="y\n" * 8
    )


#: What the docs tell a user to do with the AWS CLI before deploying (docs/deploy.md, docs/slack.md), done here
#: through boto3: a bare machine may have no AWS CLI.
def _prepare(env: dict[str, str], regions: tuple[str, ...] = ("us-east-1", "eu-west-1")) -> None:
    import boto3

    for region in regions:
        boto3.client(
            "secretsmanager",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name=region,
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        ).create_secret(
            Name="governor/slack-webhook", SecretString="https://hooks.slack.com/services/T0000000/B0000000/emulator"
        )


def _report(ok: bool, source: str, text: str, seconds: float, detail: str = "") -> None:
    mark = "ok  " if ok else "FAIL"
    print(f"{mark} {seconds:6.1f}s {source}: {text}" + (f"\n     {detail}" if detail else ""), flush=True)


def _tail(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    return "\n     ".join(lines[-12:])


def _skipped(env: dict[str, str], region: str, stack: str) -> dict[str, int]:
    import boto3

    from governor_cli.testing.local_aws import skipped_types

    cfn = boto3.client(
        "cloudformation",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name=region,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    template = json.loads(json.dumps(cfn.get_template(StackName=stack)["TemplateBody"]))
    if isinstance(template, str):
        template = json.loads(template)
    resources = [
        r
        for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack)
        for r in page["StackResourceSummaries"]
    ]
    return skipped_types(template, resources)


def check(commands: list[Command], must_fail: dict[str, str], *, read_back: bool = False) -> int:
    """Run every command on a fresh emulator; returns the count of failures.

    ``read_back`` (``deploy-local``): print what ``governor status`` answered, then put one message on a dead-letter
    queue of the deployed stack and require ``governor status`` to answer degraded (exit 1) naming that queue."""
    from governor_cli.testing.local_aws import client_environment, local_aws

    failures = 0
    with local_aws() as endpoint:
        env = client_environment(endpoint, REGION)
        env["PATH"] = f"{ROOT / '.venv' / 'bin'}:{env.get('PATH', '')}"
        print(f"emulator at {endpoint} (account 111122223333); {len(commands)} commands", flush=True)
        _prepare(env)
        for command in commands:
            began = time.monotonic()
            done = _run(command.text, env)
            ok = done.returncode == 0
            failures += not ok
            _report(ok, command.source, command.text, time.monotonic() - began, "" if ok else _tail(done))
            if read_back and command.text.startswith("governor status"):
                print(_indented(done.stdout), flush=True)
            if ok and re.match(r"npx cdk deploy\b", command.text) and "organization=" not in command.text:
                region = re.search(r"-c region=(\S+)", command.text)
                skipped = _skipped(env, region.group(1) if region else REGION, STACK)
                print(f"     emulator skipped {sum(skipped.values())} resources: {json.dumps(skipped)}", flush=True)
        if read_back:
            failures += not _degraded_by_a_dead_letter(env, REGION, STACK)
        for text, setting in must_fail.items():
            began = time.monotonic()
            done = _run(text, env)
            # On the pseudo-terminal the app's stderr arrives in the captured output.
            output = (done.stdout + done.stderr).splitlines()
            app_lines = [line.strip() for line in output if line.strip().startswith("cdk synth stopped:")]
            ok = done.returncode != 0 and len(app_lines) == 1 and setting in app_lines[0]
            failures += not ok
            _report(ok, "must stop", text, time.monotonic() - began, app_lines[0] if app_lines else _tail(done))
    total = len(commands) + len(must_fail) + read_back
    print(f"{total - failures} passed, {failures} failed", flush=True)
    return failures


def _indented(text: str) -> str:
    """``text`` under its check; without the "y" answers the pseudo-terminal echoes back."""
    return "\n".join(f"     {line}" for line in text.splitlines() if line.strip() not in ("", "y"))


def _degraded_by_a_dead_letter(env: dict[str, str], region: str, stack: str) -> bool:
    """One message on the deployed stack's first dead-letter queue: ``governor status`` must exit 1 and say so."""
    import boto3

    credentials = {
        "endpoint_url": env["AWS_ENDPOINT_URL"],
        "region_name": region,
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }
    began = time.monotonic()
    resources = boto3.client("cloudformation", **credentials).list_stack_resources(StackName=stack)
    queues = [
        r["PhysicalResourceId"]
        for r in resources["StackResourceSummaries"]
        if r["ResourceType"] == "AWS::SQS::Queue" and "Dlq" in r["LogicalResourceId"]
    ]
    text = f"governor status --stack {stack} --region {region}"
    if not queues:
        _report(False, "dead letter", text, time.monotonic() - began, "the deployed stack has no dead-letter queue")
        return False
    queue = sorted(queues)[0]
    boto3.client("sqs", **credentials).send_message(QueueUrl=queue, MessageBody='{"detail-type": "deploy-local"}')
    done = _run(text, env)
    name = queue.rsplit("/", 1)[-1]
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("DEGRADED")]
    ok = done.returncode == 1 and any(name in line and "1 message waiting" in line for line in lines)
    _report(ok, "dead letter", f"{text} (one message on {name}: must exit 1)", time.monotonic() - began)
    print(_indented("\n".join(lines)) if ok else _tail(done), flush=True)
    return ok


#: The short path: bootstrap, deploy one region, read it back.
LOCAL = [
    Command("deploy-local", "npx cdk bootstrap aws://111122223333/us-east-1"),
    Command("deploy-local", "npx cdk deploy -c account=111122223333 -c region=us-east-1"),
    Command("deploy-local", "governor status --stack GpuFleetGovernor --region us-east-1"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the documented deploy commands, on the local emulator")
    parser.add_argument("mode", choices=("check", "local", "list"))
    args = parser.parse_args(argv)
    if args.mode == "list":
        for command in documented_commands():
            print(f"{command.source}: {command.text}")
        return 0
    if args.mode == "local":
        return 1 if check(LOCAL, {}, read_back=True) else 0
    commands = documented_commands()
    if not commands:
        print("no documented deploy commands found", file=sys.stderr)
        return 2
    return 1 if check(commands, MUST_FAIL) else 0


if __name__ == "__main__":
    raise SystemExit(main())
