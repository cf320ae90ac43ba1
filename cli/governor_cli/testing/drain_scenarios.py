"""Kubernetes drains as a fault mode: an EKS GPU node idle by DCGM, reclaimed by the deployed idle function through
its cluster's API (``governor_cli.testing.kubeapi``'s loopback fake, reached by the production path: DescribeCluster,
an STS-presigned token), while that API fails the way clusters fail: an eviction answered 500 or 429, a cordon that
hangs until the gateway answers 504, the node vanishing mid-drain, a PodDisruptionBudget that never lets go.

Each is a row of RELIABILITY.md's scenario table, judged by the drain's rules (``governor.idle.kubernetes.drain``)
from what the bus accepted and what the cluster's API saw:

* never reported terminated while the node is still in the cluster, and "terminated" at most once (one finding per
  real outcome: an ending, removing, terminated or given up, is never said under two ids; a drain that cannot go on
  says so every pass, by design);
* it resumes where it stopped: one cordon for the whole drain, no fresh warning once it acted, and ``gone`` once the
  faults stop (when the node is still there to reclaim);
* when it gives up, the node is un-cordoned and a finding says so; a vanished node is said, never a silent skip.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from governor_cli.testing.fault_scenarios import ScenarioResult, World, _emulator, sweep_event
from governor_cli.testing.faults import FaultInjector
from governor_cli.testing.kubeapi import FakeApiServer

#: Sweeps after the faults stop in which a resumable drain must reach ``gone``.
SETTLE = 3


def _cluster(deployed: Any, start: dt.datetime) -> Any:
    """The demo's EKS cluster (one Karpenter GPU node, its DCGM series idle) in the emulator, the deployed idle
    function's policy naming it (``reclaim: drain``, enforcing)."""
    from governor.adapters.aws import client
    from governor_cli.demo.capabilities.idle.eks import DemoCluster
    from governor_cli.testing.deployment import image_id, reset_handler_caches
    from governor_cli.testing.events import ACCOUNT

    eks = DemoCluster()
    deployed.policy = eks.policy(deployed.policy)
    deployed._active = None  # the next activation carries the policy naming the cluster
    reset_handler_caches()
    ec2 = client("ec2", deployed.region)
    eks.launch(ec2, image_id(), dict(deployed.policy.fleet.fleet_tags), "alice@example.com")
    eks.register(client("eks", deployed.region), ACCOUNT, deployed.region)
    return eks


def _node_findings(world: World, instance: str) -> list[dict[str, Any]]:
    """Findings about the node the bus accepted, in order (a resent PutEvents once), each with the delivery that
    published it (``_delivery``: its label without the attempt)."""
    found: dict[str, dict[str, Any]] = {}
    for call in world.calls():
        if call.operation != "PutEvents" or not call.ok or call.executed == 0:
            continue
        for entry in call.params.get("Entries") or []:
            detail = json.loads(entry.get("Detail") or "{}")
            if detail.get("resource") == instance:
                found.setdefault(str(detail.get("id")), {**detail, "_delivery": str(call.label).split("#")[0]})
    return list(found.values())


def _terminated(title: str) -> bool:
    return " terminated" in title and not any(w in title for w in ("will be terminated", "not yet"))


#: Endings said once; a drain that cannot go on (blocked, stopped, not reclaimed) says so every pass, by design.
FINAL = ("terminated:", "removing it", "given up")


def _said_once(findings: list[dict[str, Any]], present: set[str], expect: str) -> list[str]:
    """Never terminated while the node is in the cluster; terminated once at most (once exactly when gone); each
    ending under one id."""
    problems = []
    terminated = [str(f.get("title")) for f in findings if _terminated(str(f.get("title")))]
    early = [f for f in findings if _terminated(str(f.get("title"))) and f["_delivery"] in present]
    if early:
        problems.append(f"reported terminated while the node is still in the cluster: {early[0]['title']}")
    if len(terminated) > (1 if expect == "gone" else 0):
        problems.append(f"terminated said {len(terminated)} times (expected {1 if expect == 'gone' else 0})")
    if expect == "gone" and not terminated:
        problems.append("the node is gone and no finding says terminated")
    by_title: dict[str, set[str]] = {}
    for finding in findings:
        by_title.setdefault(str(finding.get("title")), set()).add(str(finding.get("id")))
    doubled = [t for t, ids in by_title.items() if len(ids) > 1 and any(word in t for word in FINAL)]
    if doubled:
        problems.append(f"one outcome under {len(by_title[doubled[0]])} finding ids: {doubled[0]}")
    return problems


def _resumed(findings: list[dict[str, Any]], api: FakeApiServer) -> list[str]:
    """One cordon for the whole drain (a cordon that never went through apart); no fresh warning while it runs."""
    problems = []
    titles = [str(f.get("title")) for f in findings]
    cordons = [p for m, p, b in api.calls if m == "PATCH" and (b or {}).get("spec", {}).get("unschedulable")]
    if len(cordons) > 1 and not any("not cordoned" in t for t in titles):
        problems.append(f"cordoned {len(cordons)} times: the drain started again instead of resuming")
    warned_after_act, begun = False, False
    for finding in findings:  # once the drain has begun, no fresh warning until it has ended (gone, given up)
        title = str(finding.get("title"))
        if finding.get("rule") == "idle.warned":
            warned_after_act = warned_after_act or begun
        else:
            begun = "of cluster" in title and not any(word in title for word in ("terminated:", "given up"))
    if warned_after_act:
        problems.append("warned afresh after the drain had begun")
    return problems


def _ended(state: str | None, titles: list[str], api: FakeApiServer, expect: str) -> list[str]:
    """The drain ended as expected; given up, the node un-cordoned and said so; vanished, said."""
    problems = [] if state == expect else [f"the drain ended {state}, not {expect}"]
    if expect == "gave-up" and api.node.get("spec", {}).get("unschedulable"):
        problems.append("gave up and left the node cordoned")
    if expect == "gave-up" and not any("given up" in t and "un-cordoned" in t for t in titles):
        problems.append("gave up without a finding saying the node was un-cordoned")
    if expect == "no-path" and not any("not reclaimed" in t for t in titles):
        problems.append("the node vanished and no finding said so")
    return problems


def _judge(
    result: ScenarioResult, world: World, api: FakeApiServer, instance: str, present: set[str], *, expect: str
) -> None:
    """The drain's rules over what the bus accepted and the API saw; ``present``: the deliveries after which the
    node was still in the cluster; ``expect`` is the state the drain must end in."""
    from governor.adapters.ledger import DynamoLedger
    from governor.idle.kubernetes.drain_state import DRAIN_KIND
    from governor_cli.testing.faults import unlabelled

    findings = _node_findings(world, instance)
    result.events = len({event["id"] for _, event, _ in world.sent})
    result.lost += sum(1 for _, _, ok in world.sent if not ok)
    result.findings_expected = result.findings_published = len(findings)
    titles = [str(f.get("title")) for f in findings]
    with unlabelled():
        ledger = DynamoLedger(world.deployment.local.ledger_table, region=world.deployment.region)
        drain = ledger.get_item(DRAIN_KIND, instance)
    problems = _said_once(findings, present, expect) + _resumed(findings, api)
    problems += _ended((drain or {}).get("state"), titles, api, expect)
    result.problems += problems + ([f"titles: {titles}"] if problems else [])


def _drain(
    name: str, story: str, expect: str, fault: Callable[[FakeApiServer], None], faulty_sweeps: int, clear: bool
) -> ScenarioResult:
    """The node warned, then swept every interval with ``fault`` applied for ``faulty_sweeps`` sweeps; then (with
    ``clear``) the faults stop and ``SETTLE`` more sweeps run; then the runbook."""
    from governor.idle.domain import sweep_interval
    from governor.outbox import STALE_AFTER

    result = ScenarioResult(name, story)
    start = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(hours=2)
    with _emulator("idle") as deployed, FaultInjector() as injector:
        eks = _cluster(deployed, start)
        try:
            world = World(deployed, injector, start)
            api: FakeApiServer = eks.api
            interval = sweep_interval(deployed.policy.idle)
            scraped = start - dt.timedelta(minutes=60)

            present: set[str] = set()

            def sweep(at: dt.datetime) -> None:
                nonlocal scraped
                eks.scrape(scraped, at + dt.timedelta(minutes=1))  # DCGM's series, idle, up to the sweep
                scraped = at + dt.timedelta(minutes=1)
                world.deliver("idle", sweep_event(at), at)
                if not (api.node_gone or api.deleted_claims):
                    present.add(world.sent[-1][0])

            at = start
            sweep(at)  # the warning
            fault(api)
            for _ in range(faulty_sweeps):
                at += max(interval, dt.timedelta(minutes=30))
                sweep(at)
            if clear:
                api.failures, api.protected = {}, set()
                for _ in range(SETTLE):
                    at += interval
                    sweep(at)
            eks.scrape(scraped, at + interval + STALE_AFTER + dt.timedelta(minutes=2))
            result.replayed = world.runbook(["idle"], at + interval)
            _judge(result, world, api, str(eks.instance), present, expect=expect)
        finally:
            eks.stop()
    return result


def eviction_500() -> ScenarioResult:
    return _drain(
        "drain: eviction answered 500",
        "EKS GPU node idle by DCGM, warned; every eviction answered HTTP 500 for two sweeps, then the API recovers",
        "gone",
        lambda api: api.failures.update({("POST", "/eviction"): 500}),
        2,
        True,
    )


def eviction_429() -> ScenarioResult:
    return _drain(
        "drain: eviction throttled (429)",
        "every eviction answered HTTP 429 (API priority and fairness) for two sweeps, then accepted",
        "gone",
        lambda api: api.failures.update({("POST", "/eviction"): 429}),
        2,
        True,
    )


def cordon_times_out() -> ScenarioResult:
    return _drain(
        "drain: cordon hangs (504)",
        "the cordon's PATCH hangs until the API gateway answers 504, two sweeps; then it goes through",
        "gone",
        lambda api: api.failures.update({("PATCH", f"/api/v1/nodes/{api.node_name}"): 504}),
        2,
        True,
    )


def node_vanishes() -> ScenarioResult:
    def vanish(api: FakeApiServer) -> None:
        api.failures.update({("POST", "/eviction"): 500})
        original = api.answer

        def answer(method: str, path: str, *args: Any) -> tuple[int, Any]:
            if method == "POST" and path.endswith("/eviction"):
                api.node_gone = True  # the node leaves the cluster while its pods are being evicted
            return original(method, path, *args)

        api.answer = answer  # type: ignore[method-assign,assignment]

    return _drain(
        "drain: node vanishes mid-drain",
        "cordoned, then the node leaves the cluster during its evictions (its instance still runs)",
        "no-path",
        vanish,
        2,
        False,
    )


def pdb_blocks() -> ScenarioResult:
    from governor.idle.kubernetes.drain_state import MAX_ATTEMPTS
    from governor_cli.demo.capabilities.idle.eks import IDLE_POD

    return _drain(
        "drain: PodDisruptionBudget blocks",
        "a PodDisruptionBudget refuses the idle pod's eviction (429) every sweep until the drain gives up",
        "gave-up",
        lambda api: api.protected.add("/".join(IDLE_POD)),
        MAX_ATTEMPTS + 1,
        False,
    )


SCENARIOS = [eviction_500, eviction_429, cordon_times_out, node_vanishes, pdb_blocks]
