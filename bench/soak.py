"""The long fault run: >= 1,000 mixed, independent events through every deployed handler on the in-process emulator,
one failure mode per row, each case compared with a clean case of its kind. Prints the table and writes
RELIABILITY.md.

    .venv/bin/python -m bench.soak              # 7 (quiet) to 17 (busy) minutes on 2 cores, 1,630 events
    .venv/bin/python -m bench.soak --quick      # 1/5 of the events, for a look
    .venv/bin/python -m bench.soak --scale 0.1  # any share of the events (each row also runs one idle episode)
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

COMMAND = ".venv/bin/python -m bench.soak"


@dataclass(frozen=True)
class Mode:
    name: str
    kinds: tuple[str, ...]
    rate: float
    events: int
    duplicates: float = 0.2
    only: str | None = None  # a predicate of governor_cli.testing.faults narrowing which calls may fail
    capabilities: tuple[str, ...] = ()  # only these capabilities' cases (all when empty)


MODES = [
    Mode("duplicate deliveries, no fault", (), 0.0, 150, duplicates=0.5),
    Mode("throttling", ("throttling",), 0.15, 150),
    Mode("5xx (service unavailable)", ("server_error",), 0.15, 150),
    Mode("connect timeouts", ("connect_timeout",), 0.10, 150),
    Mode("read timeouts (executed, answer lost)", ("read_timeout",), 0.05, 150),
    Mode("access denied", ("access_denied",), 0.05, 150),
    Mode(
        "all of the above, mixed",
        ("throttling", "server_error", "connect_timeout", "read_timeout", "access_denied"),
        0.10,
        200,
    ),
    Mode("PutEvents refused (FailedEntryCount)", ("failed_entries",), 0.60, 150, only="is_put_events"),
    Mode("DynamoDB throttling on conditional writes", ("throttling",), 0.50, 150, only="is_conditional_write"),
    Mode("read timeouts on mutating calls", ("read_timeout",), 0.15, 150, only="is_mutating"),
    Mode(
        "BatchImportFindings: answer lost, throttled, 5xx, denied",
        ("read_timeout", "throttling", "server_error", "access_denied"),
        0.60,
        100,
        only="is_batch_import",
        capabilities=("securityhub",),
    ),
]


def _environment() -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_LOG_LEVEL": "CRITICAL",
        "POWERTOOLS_IDEMPOTENCY_DISABLED": "false",
    }.items():
        os.environ[name] = value
    os.environ.pop("AWS_PROFILE", None)
    os.environ.pop("AWS_ENDPOINT_URL", None)


def run_mode(mode: Mode, seed: int, scale: float, timeouts: dict[str, float]) -> dict[str, Any]:
    """One row: a fresh emulator, a clean case of every kind, then the mode's events under its faults."""
    _environment()
    import contextlib
    import io

    from moto import mock_aws

    from governor_cli.testing import faults
    from governor_cli.testing.deployment import REGION, Deployment
    from governor_cli.testing.faults import ALL_FAULTS, FaultInjector, fake_slack
    from governor_cli.testing.hub_state import clean_states, fold_hub, hub_states, judge
    from governor_cli.testing.idle_soak import fold, idle_policy, run_idle
    from governor_cli.testing.invariants import check, follow_runbook, references, run_cases
    from governor_cli.testing.scenarios import Scenarios, soak_policy

    started = time.perf_counter()
    events = max(10, int(mode.events * scale))
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), mock_aws(config={"lambda": {"use_docker": False}}), fake_slack():
        deployed = Deployment(soak_policy())
        try:
            scenarios = Scenarios(seed=seed)
            with FaultInjector() as recorder:
                clean_runs = run_cases(deployed, scenarios.one_of_each(), recorder)
            clean = references(clean_runs)
            clean_hub = clean_states(clean_runs, hub_states(REGION))
            cases = scenarios.make(events, capabilities=mode.capabilities)
            kinds = mode.kinds or ALL_FAULTS
            only = getattr(faults, mode.only) if mode.only else None
            with FaultInjector(mode.rate, kinds, seed=seed, only=only) as injector:
                faulty = run_cases(
                    deployed,
                    cases,
                    injector,
                    duplicate_share=mode.duplicates,
                    seed=seed,
                    after=lambda runs: follow_runbook(deployed, runs, injector),
                )
            hub = judge(faulty, hub_states(REGION), clean_hub)
        finally:
            deployed.close()
    verdict = check(mode.name, mode.rate, clean, faulty, injector, timeouts, runbook=True)
    fold_hub(verdict, hub)
    # The idle function's sweeps judge the whole fleet: an episode of its own, checked against the rules themselves.
    with contextlib.redirect_stdout(quiet), mock_aws(config={"lambda": {"use_docker": False}}), fake_slack():
        deployed = Deployment(idle_policy())
        try:
            with FaultInjector(mode.rate, kinds, seed=seed, only=only) as idle_injector:
                episode = run_idle(deployed, idle_injector, seed=seed, duplicate_share=mode.duplicates)
        finally:
            deployed.close()
    fold(verdict, episode, idle_injector, timeouts.get("idle"))
    return {
        "mode": mode.name,
        "kinds": list(mode.kinds),
        "verdict": verdict,
        "seconds": time.perf_counter() - started,
        "functions": sorted({c.function for c in cases} | {"idle"}),
    }


def run_scenarios() -> list[Any]:
    """Issue 35's named fault scenarios (``governor_cli.testing.fault_scenarios``), then the Kubernetes drains'
    (``drain_scenarios``: the cluster's API failing), each on its own emulator. Gathered here: the drain scenarios
    build on the fault scenarios' world, so the fault scenarios do not import them back."""
    _environment()
    import governor_cli.testing.faults  # noqa: F401  (the botocore hooks, before any client exists)
    from governor_cli.testing.drain_scenarios import SCENARIOS as DRAINS
    from governor_cli.testing.fault_scenarios import SCENARIOS

    return [scenario() for scenario in (*SCENARIOS, *DRAINS)]


def function_timeouts() -> dict[str, float]:
    """Each function's Lambda timeout, read from the synthesized stack (the truth the handlers must fit in)."""
    import json
    import tempfile

    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20,22")
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "20,22")
    from infra.app_builder import build_app

    with tempfile.TemporaryDirectory() as folder:
        app, stack = build_app(outdir=folder)
        app.synth()
        template = json.loads((Path(folder) / f"{stack.stack_name}.template.json").read_text())
    found: dict[str, float] = {}
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        handler = props.get("Handler", "")
        if resource["Type"] == "AWS::Lambda::Function" and handler.endswith(".handler.lambda_handler"):
            found[handler.split(".")[1]] = float(props.get("Timeout", 3))
    return found


def worst_single_call() -> tuple[int, float]:
    """Attempts and seconds one API call can take when every attempt times out (botocore standard mode)."""
    from governor.adapters.aws import RETRIES

    attempts = int(RETRIES.retries.get("total_max_attempts") or RETRIES.retries["max_attempts"] + 1)
    backoff = sum(min(20.0, 2.0**n) for n in range(attempts - 1))  # standard mode: random up to 2^n s, capped at 20
    return attempts, attempts * float(RETRIES.connect_timeout + RETRIES.read_timeout) + backoff


def render(
    results: list[dict[str, Any]], timeouts: dict[str, float], elapsed: float, scenarios: list[Any] | None = None
) -> str:
    from governor.interactions.slack_calls import endpoint_worst_seconds

    attempts, worst = worst_single_call()
    total_events = sum(r["verdict"].events for r in results)
    scenarios = scenarios or []
    lost = sum(r["verdict"].lost for r in results) + sum(s.lost for s in scenarios)
    findings_lost = sum(r["verdict"].findings_lost for r in results) + sum(s.findings_lost for s in scenarios)
    clicks_lost = sum(r["verdict"].stop_now_lost for r in results)
    clicks = sum(r["verdict"].stop_now_clicks for r in results)
    hub_bad = sum(r["verdict"].hub_lost + r["verdict"].hub_resurrected for r in results)
    hub_records = sum(r["verdict"].hub_records for r in results)
    resent = sum(r["verdict"].resent_non_idempotent for r in results) + sum(s.resent_non_idempotent for s in scenarios)
    total_events += sum(s.events for s in scenarios)
    lines = [
        "# Reliability",
        "",
        f"Regenerate with `{COMMAND}` (writes this file; `--quick` runs a fifth of the events). Last run: "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {total_events} events in {elapsed / 60:.0f} minutes.",
        "",
        "Each row is one failure mode injected into every AWS call the deployed handlers make (botocore event hooks, "
        "per attempt, so the real retry logic handles them), over independent mixed events: Spot interruption "
        "warnings, security groups opened to the world, KMS rotation switched off, GPU launches, their non-GPU and "
        "protected look-alikes the policy must leave alone, findings for the notifier to deliver to Slack and email, "
        "scheduled report ticks, Slack clicks (Keep 4 h and Stop now as the worker receives them; signed and forged "
        "requests at the Function URL, answered once, never retried), and malformed events. Slack itself is answered "
        "in process and faulted like an AWS call (429, 503, 403 invalid_token, connect timeout, and a read timeout "
        "after Slack took the message). Each row also runs an idle episode on its own emulator: a fleet of idle and "
        "busy GPU instances swept every 15 simulated minutes for 90 minutes plus a Stop now click, checked against "
        "the rules (a stop only after the warning was accepted by the bus at least the warning period earlier; one "
        "checkpoint command per instance; a decision recorded for every sweep handled). A share of the events is "
        "delivered "
        "again later (EventBridge's at-least-once). Every case is compared with a clean run of its kind: handled means "
        "it acted exactly as the clean run did, once; parked means Lambda's retries ran out and the event is in the "
        "function's DLQ with its reason (`governor dlq list`, `governor dlq replay`). Then each row ends as an "
        "operator ends an incident (docs/reliability.md's runbook, `governor_cli/testing/runbook.py`), with the faults "
        "off: every message in every function's DLQ re-delivered once through `governor dlq replay`'s own code "
        "(`DlqAdmin.replay`), then one idle sweep past the stale age, whose flush publishes what any function left "
        "staged. Lost means still parked after that replay (a malformed event apart: its rejection with a reason is "
        'the clean outcome) or never handled. "Action '
        'not done" counts events handled without an action the clean run took (the handler recorded the refusal, '
        'e.g. SSM access denied, instead of retrying); "ledger differs" counts events whose ledger entry says '
        "something other than the clean run's decision.",
        "",
        "",
        'Findings are followed by their deterministic id: "findings published" counts the findings the clean runs '
        'published that the faulty run got accepted by the bus (of those expected); "findings lost" counts those '
        "neither published nor held unsent in the outbox (an event parked in its DLQ keeps its findings there until "
        'the replay or the next sweep publishes them: the number in brackets). "Calls resent" counts extra '
        "executions of calls without a client token whose repetition is a second effect (SSM SendCommand, KMS "
        "RotateKeyOnDemand), then in brackets the idempotent ones botocore resent after a lost answer (CreateTags, "
        "RevokeSecurityGroupIngress...: same end state). PutEvents is resent too (same finding id, recognised "
        "downstream): see the last paragraph. The last column counts deliveries with no idempotency key on the wire "
        "(a Slack webhook post, an SES email, Lambda's asynchronous Invoke) sent again because the answer, or the "
        "record that it was done, was lost: unavoidable without giving up at-least-once; the click worker and the "
        "idle function drop a repeated event id, a person may see a Slack message or an email twice. A delivery "
        "repeated with nothing lost counts as acted twice.",
        "",
        "Stop now is a fault mode of its own: in each idle episode the owner of an idle instance answers its warning "
        "with Stop now as Slack sends it (a signed POST to the interactions Function URL, clicked again while Slack "
        "shows an error), then the endpoint's worker and the idle function run what each was handed (every Invoke "
        "that reached Lambda, a resent one twice), under the row's faults. The last column counts the clicks (those "
        "the endpoint accepted): the instances a click stopped, the accepted clicks answered with a recorded refusal "
        "(the idle function's re-checks, an expired or used record, a second click on the same message held back; "
        "each reason is listed below), and those never answered (lost).",
        "",
        "The Security Hub export is in the mix too: governor findings (staged in the outbox by their maker, as the "
        "export requires) routed to the securityhub function as the bus rule delivers them, enforcing with ASFF, "
        "and resolved records whose fix (ARCHIVED) is followed by the record's older open finding delivered again "
        "(a retry, a replay: out of order). A repeated import of the same record is the same end state (counted "
        "with the idempotent resends); what counts is what Security Hub holds after the runbook "
        "(`governor_cli/testing/hub_state.py`): each record must be in the state its newest finding gives it (by "
        "the finding's own time) and the state the clean run left. The last column counts records missing (an "
        "export parked without alarm, or handled without importing: lost), ACTIVE again after their fix "
        "(resurrected), and otherwise unlike the clean run's, of those judged. The emulator keeps the last import "
        "whatever its UpdatedAt (Security Hub itself ignores an older one), so only the export's own ordering keeps "
        "a fix archived here. The last fault row fails Security Hub's BatchImportFindings alone: its answer lost "
        "after the import, throttled, 5xx, access denied.",
        "",
        "| failure mode | events (+ duplicates) | fault rate | faults injected | handled | rejected (invalid) "
        "| parked, then replayed | action not done | acted twice | outside policy | ledger differs | lost "
        "| findings published (unsent, in outbox) | findings lost | calls resent: non-idempotent (idempotent) "
        "| deliveries resent after a lost answer (same id) | Stop now clicks (accepted): stopped, refused, lost "
        "| Security Hub records: lost, resurrected, differ (of) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        v = result["verdict"]
        injected = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(v.faults.items())) or "none"
        partial = f" ({v.partial_before_dlq} partly acted)" if v.partial_before_dlq else ""
        lines.append(
            f"| {v.mode} | {v.events} (+{v.deliveries - v.events}) | {v.rate:.0%} | {injected} | {v.handled} "
            f"| {v.rejected} | {v.dlq}{partial} | {v.missed_actions} | {v.double_actions} | {v.outside_policy} "
            f"| {v.ledger_mismatches} "
            f"| **{v.lost}** | {v.findings_published} of {v.findings_expected} ({v.findings_unsent}) "
            f"| **{v.findings_lost}** | **{v.resent_non_idempotent}** ({v.resent - v.resent_non_idempotent}) "
            f"| {v.resent_by_id} | {v.stop_now_clicks} ({v.stop_now_accepted}): {v.stop_now_stopped}, "
            f"{v.stop_now_refused}, **{v.stop_now_lost}** "
            f"| **{v.hub_lost}**, **{v.hub_resurrected}**, {v.hub_differs} ({v.hub_records}) |"
        )
    if scenarios:
        lines += [
            "",
            "## Fault scenarios (issue 35; Kubernetes drains, issue 46)",
            "",
            "Orderings random faults rarely produce, each through the deployed handlers on its own emulator "
            "(`governor_cli/testing/fault_scenarios.py`), Lambda's retries at their real times (+1 and +3 minutes, "
            "so Powertools' in-progress records expire as they would), then the same runbook. The idle ones are judged "
            "by the idle episode's rules, a stop counting as a finding that must be accepted by the bus.",
            "",
            "The drain rows (`governor_cli/testing/drain_scenarios.py`) reclaim an EKS GPU node idle by DCGM (read "
            "through Prometheus) with the deployed idle function, through the cluster's API (a loopback fake reached "
            "by the production path: DescribeCluster, an STS-presigned token) while that API fails. They are judged by "
            "the drain's rules: never reported terminated while the node is still in the cluster, an ending said once; "
            "resumed where it stopped (one cordon, no fresh warning while it runs, gone once the API recovers); when "
            "it gives up the node is un-cordoned and a finding says so; a vanished node is said, never skipped. "
            "Findings published counts those the bus accepted about the node; any broken rule is listed below.",
            "",
            "| scenario | what happens | events | replayed by the runbook | lost | findings published "
            "| findings lost | non-idempotent calls sent twice |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for scenario in scenarios:
            lines.append(
                f"| {scenario.name} | {scenario.story} | {scenario.events} | {scenario.replayed} "
                f"| **{scenario.lost}** | {scenario.findings_published} of {scenario.findings_expected} "
                f"| **{scenario.findings_lost}** | **{scenario.resent_non_idempotent}** |"
            )
    lines += [
        "",
        f"**Lost: {lost} of {total_events} events; findings lost: {findings_lost}; non-idempotent calls resent: "
        f"{resent}; Stop now clicks never answered: {clicks_lost} of {clicks}; Security Hub records lost or "
        f"resurrected: {hub_bad} of {hub_records}.** Functions exercised: {', '.join(sorted({f for r in results for f in r['functions']}))}. "
        f"Findings published twice (same id; the notifier delivers an id once): "
        f"{sum(r['verdict'].findings_twice for r in results)}.",
        "",
        "## Time budget",
        "",
        f"Slowest attempt observed (wall time plus injected back-off and timeouts, on the virtual clock): "
        f"{max(r['verdict'].slowest_seconds for r in results):.1f} s; attempts over their function's Lambda timeout: "
        f"{sum(r['verdict'].over_timeout for r in results)}. Timeouts: "
        + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in sorted(timeouts.items()))
        + ".",
        "",
        f"Retry configuration (`adapters/aws.py`): standard mode, {attempts} attempts per call. One call whose every "
        f"attempt hangs until the read timeout takes up to {worst:.0f} s, "
        + (
            "more than the shortest Lambda timeout: Lambda ends such an invocation and retries it; the idempotency "
            "record expires with the invocation, so the retry runs."
            if timeouts and worst > min(timeouts.values())
            else "within every function's timeout."
        ),
        "",
        "## What went wrong",
        "",
    ]
    endpoint = endpoint_worst_seconds()
    lines[-3:-3] = [
        "",
        f"Slack's click requests: the Function URL path makes one attempt per call with short timeouts "
        f"(`interactions/slack_calls.py`), so it answers within {endpoint / 2:.1f} s warm and {endpoint:.1f} s at worst "
        "on a cold container whose two calls both hang (Slack wants 3 s); the worker (asynchronous) has the "
        "function's timeout.",
    ]
    problems = [(r["mode"], p) for r in results for p in r["verdict"].problems]
    problems += [(s.name, p) for s in scenarios for p in s.problems]
    if not problems:
        lines.append("Nothing: every event was handled exactly once, nothing still parked or unsent after the runbook.")
    for mode, problem in problems[:40]:
        lines.append(f"- {mode}: {problem}")
    notes = [(r["mode"], n) for r in results for n in r["verdict"].notes]
    if notes:
        lines += ["", "Delivered again after a lost answer, and other notes:", ""]
        lines += [f"- {mode}: {note}" for mode, note in notes[:30]]
        if len(notes) > 30:
            lines.append(f"- ... and {len(notes) - 30} more.")
    if len(problems) > 40:
        lines.append(f"- ... and {len(problems) - 40} more (run `{COMMAND}` to see them all).")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a fifth of the events")
    parser.add_argument("--scale", type=float, help="share of each mode's events (default 1, or 0.2 with --quick)")
    parser.add_argument("--workers", type=int, default=2, help="parallel failure modes (default 2)")
    parser.add_argument("--mode", action="append", help="only the modes whose name contains this (repeatable)")
    parser.add_argument("--no-scenarios", action="store_true", help="skip issue 35's named fault scenarios")
    parser.add_argument("--out", default=str(ROOT / "RELIABILITY.md"), help="where to write the table")
    args = parser.parse_args(argv)
    _environment()
    started = time.perf_counter()
    try:
        timeouts = function_timeouts()
    except Exception as error:  # no Node.js: fall back to the factory's default timeout
        print(f"could not synthesize the stack for timeouts ({error}); assuming 60 s", file=sys.stderr)
        timeouts = {}
    scale = args.scale if args.scale else 0.2 if args.quick else 1.0
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        chosen = [
            (n, mode)
            for n, mode in enumerate(MODES)
            if not args.mode or any(part.lower() in mode.name.lower() for part in args.mode)
        ]
        futures = [pool.submit(run_mode, mode, 100 + n, scale, timeouts) for n, mode in chosen]
        scenarios_future = pool.submit(run_scenarios) if not args.no_scenarios else None
        results = []
        for future in futures:
            result = future.result()
            v = result["verdict"]
            print(
                f"{v.mode:40} events {v.events:4} faults {sum(v.faults.values()):4} handled {v.handled:4} "
                f"rejected {v.rejected:3} dlq {v.dlq:3} twice {v.double_actions:2} outside {v.outside_policy} "
                f"ledger {v.ledger_mismatches:2} lost {v.lost} findings {v.findings_published}/{v.findings_expected} "
                f"unsent {v.findings_unsent} lost {v.findings_lost} resent {v.resent_non_idempotent} "
                f"stop-now {v.stop_now_clicks}/{v.stop_now_stopped}/{v.stop_now_refused}/{v.stop_now_lost} "
                f"hub {v.hub_records}/{v.hub_lost}/{v.hub_resurrected}/{v.hub_differs} "
                f"({result['seconds']:.0f} s)",
                flush=True,
            )
            results.append(result)
        scenarios = scenarios_future.result() if scenarios_future is not None else []
        for scenario in scenarios:
            print(
                f"{scenario.name:40} events {scenario.events:4} replayed {scenario.replayed} lost {scenario.lost} "
                f"findings {scenario.findings_published}/{scenario.findings_expected} lost {scenario.findings_lost} "
                f"resent {scenario.resent_non_idempotent} {'; '.join(scenario.problems)}",
                flush=True,
            )
    text = render(results, timeouts, time.perf_counter() - started, scenarios)
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    bad = sum(
        r["verdict"].lost
        + r["verdict"].findings_lost
        + r["verdict"].resent_non_idempotent
        + r["verdict"].stop_now_lost
        + r["verdict"].hub_lost
        + r["verdict"].hub_resurrected
        + r["verdict"].hub_differs
        for r in results
    )
    bad += sum(s.lost + s.findings_lost + s.resent_non_idempotent for s in scenarios)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
