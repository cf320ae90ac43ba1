"""``governor demo``: synthesize the app with cdk-nag and show what it would deploy and do.

Run from a checkout (it needs ``app.py`` and ``infra/``). Later stages drive a simulated GPU fleet on the local
emulator through the same handlers.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from governor.policy import Policy, PolicyError, load_policy


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="synthesize the stack and run a simulated GPU fleet locally")
    from governor_cli.flags import add_policy

    add_policy(parser)  # the demo runs in a checkout, whose ./governor.yaml is the shipped policy documented
    parser.add_argument("--enforce", action="store_true", help="switch every policy to enforce for the simulation")
    parser.add_argument("--out", default="out", help="folder for the report and logs (default: out)")
    parser.add_argument("--cdk-out", default="cdk.out", help="folder for the synthesized templates")
    parser.add_argument("--skip-synth", action="store_true", help="only run the simulation")
    parser.add_argument("--instances", type=int, default=20, help="simulated GPU instances (default 20)")
    parser.add_argument("--hours", type=float, default=12.0, help="simulated hours (default 12)")
    parser.add_argument("--port", type=int, default=0, help="emulator port (default: a free one)")
    parser.add_argument(
        "--accounts",
        type=int,
        default=1,
        help="member accounts to spread the fleet over, in organisation mode (default 1: the governor's own account)",
    )
    parser.add_argument(
        "--regions", type=int, default=1, help="regions per member account (default 1; up to 4, from us-east-1)"
    )
    parser.add_argument(
        "--no-clicks",
        action="store_true",
        help="owners click no Slack button (with --enforce: reclaims exactly what the report-only run says it would)",
    )
    parser.add_argument(
        "--slack-bot",
        action="store_true",
        help="post findings with the Slack bot token to a channel (one message per idle episode, updated in place) "
        "instead of the webhook (docs/slack.md §3a)",
    )
    parser.set_defaults(run=run)


def find_checkout(start: Path) -> Path:
    from governor_cli.main import UsageError

    for folder in (start, *start.parents):
        if (folder / "app.py").is_file() and (folder / "infra").is_dir():
            return folder
    raise UsageError(f"{start}: not inside a GPU Fleet Governor checkout (no app.py and infra/ found)")


def synth_summary(policy_file: Path, cdk_out: Path) -> list[str]:
    """Synthesize with cdk-nag (raises on a finding) and describe functions, triggers and report-only behaviour."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20,22")
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "20,22")
    from infra.app_builder import build_app

    app, stack = build_app(policy_file=policy_file, outdir=str(cdk_out))
    assembly = app.synth()
    template = assembly.get_stack_by_name(stack.stack_name).template
    resources: dict[str, Any] = template["Resources"]
    packs = "cdk-nag AwsSolutions and NIST 800-53 rev 5 clean"
    lines = [f"stack {stack.stack_name}: {len(resources)} resources, {packs}, template in {cdk_out}/; {sizes_text()}"]
    return lines + function_lines(stack.policy, stack.functions)


def sizes_text(out: Path | None = None, manifest: Path | None = None) -> str:
    """Each function's code plus layers, unzipped, as ``make layer``'s build measured them (never typed)."""
    from infra.build_layer import LAYER_DIR, MANIFEST, built_sizes
    from infra.layer_manifest import megabytes

    sizes = built_sizes(out or LAYER_DIR, manifest or MANIFEST)
    if sizes is None:
        return "function sizes: run make layer (no current build to measure)"
    return "code + layers unzipped: " + ", ".join(f"{name} {megabytes(size)}" for name, size in sizes.items())


def function_lines(policy: Policy, functions: Mapping[str, Any]) -> list[str]:
    """One line per deployed function with its mode as the registry describes it, then its triggers."""
    from governor.registry import REGISTRY

    lines = []
    for name, function in sorted(functions.items()):
        lines.append(f"  function {name} [{REGISTRY[name].mode(policy)}]: {function.description}")
        lines.extend(f"    trigger: {trigger}" for trigger in function.triggers)
    return lines


DEMO_PACKAGES = {"moto": "moto[server]", "flask": "moto[server]", "time_machine": "time-machine"}


def check_demo_packages() -> None:
    """Before the 30-second synth, not after it: the emulator and the simulated clock are installed."""
    import importlib.util

    from governor_cli.main import UsageError

    missing = sorted({package for module, package in DEMO_PACKAGES.items() if importlib.util.find_spec(module) is None})
    if missing:
        raise UsageError(
            f"the demo needs {', '.join(missing)}: run `make demo`, or pip install -r requirements-demo.txt"
        )


class ProgressLine:
    """What the demo is doing: one line rewritten in place on a terminal, plain lines otherwise (CI logs, pipes)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = 0

    def __call__(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
        self.width = 0


MAX_INSTANCES = 500
MAX_HOURS = 7 * 24.0


def check_options(args: argparse.Namespace) -> None:
    """Every flag in range before anything starts: a bad one is one line naming it, never a half-started demo."""
    from governor_cli.main import UsageError

    if not 1 <= args.instances <= MAX_INSTANCES:
        raise UsageError(f"--instances {args.instances}: simulate 1 to {MAX_INSTANCES} GPU instances")
    if not (math.isfinite(args.hours) and 0 < args.hours <= MAX_HOURS):
        raise UsageError(f"--hours {args.hours:g}: simulate more than 0 and at most {MAX_HOURS:g} hours (a week)")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: a TCP port is 1..65535 (0 picks a free one)")
    from governor_cli.demo.run import MAX_ACCOUNTS, MEMBER_REGIONS

    accounts, regions = getattr(args, "accounts", 1), getattr(args, "regions", 1)
    if not 1 <= accounts <= MAX_ACCOUNTS:
        raise UsageError(f"--accounts {accounts}: simulate 1 to {MAX_ACCOUNTS} member accounts")
    if not 1 <= regions <= len(MEMBER_REGIONS):
        names = ", ".join(MEMBER_REGIONS)
        raise UsageError(f"--regions {regions}: simulate 1 to {len(MEMBER_REGIONS)} regions ({names})")
    if args.instances < accounts * regions:
        raise UsageError(f"--instances {args.instances}: at least one per account and region ({accounts} x {regions})")
    folders = [("--out", args.out)] + ([] if args.skip_synth else [("--cdk-out", args.cdk_out)])
    for flag, value in folders:
        folder = Path(value)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(f"{flag} {value}: cannot create the folder ({error.strerror or error})") from None


def run(args: argparse.Namespace) -> int:
    from governor_cli.main import UsageError

    find_checkout(Path.cwd())
    policy_file = Path(args.policy or "governor.yaml")
    try:
        load_policy(policy_file)
    except PolicyError as error:
        raise UsageError(str(error)) from None
    check_options(args)
    check_demo_packages()
    progress = ProgressLine()
    if not args.skip_synth:
        progress("synthesizing the CDK app with cdk-nag (about 30 s)")
        lines = synth_summary(policy_file, Path(args.cdk_out))
        progress.done()
        for line in lines:
            print(line, flush=True)
    from governor_cli.demo.emulator import EmulatorError
    from governor_cli.demo.run import DemoOptions, run_demo, summary_lines

    mode = "ENFORCING every policy" if args.enforce else "report-only (run `governor demo --enforce` to act)"
    where = ""
    if args.accounts * args.regions > 1:
        where = (
            f" in {args.accounts} member account(s) x {args.regions} region(s) (organisation mode: the governor in "
            "123456789012 us-east-1 acts through each account's spoke role)"
        )
    print(
        f"\nsimulating {args.instances} GPU instances for {args.hours:g} hours on the local emulator{where}, {mode}\n"
        "notifications are delivered: Slack to a capture endpoint on 127.0.0.1, email to the emulated SES, "
        f"both saved under {args.out}/",
        flush=True,
    )
    options = DemoOptions(
        policy=load_policy(policy_file),
        out=Path(args.out),
        enforce=args.enforce,
        instances=args.instances,
        hours=args.hours,
        port=args.port,
        progress=progress,
        clicks=not args.no_clicks,
        accounts=args.accounts,
        regions=args.regions,
        slack_bot=args.slack_bot,
    )
    try:
        result = run_demo(options)
    except EmulatorError as error:
        raise UsageError(str(error)) from None
    finally:
        progress.done()
    print("\n".join(summary_lines(result)))
    return 0
