"""No module outside a capability's package names that capability: what varies by capability is a field of its
declaration (``governor.<name>.capability``, listed by ``governor.registry``) or lives in its package
(``governor.<name>``, plus the CDK construct and the scenario hooks its declaration names: ``construct``, ``demo``).

A module names capability C when it imports ``governor.C`` (or below; under ``if TYPE_CHECKING`` too), C's construct
module or C's scenario hooks; holds a string literal equal to C's name or one of the ``policy`` values its findings
carry (``getattr(policy, "idle")``, ``section_of(policy, "idle", ...)``); or reads C's policy section as an attribute
of a policy (``policy.idle``, ``runtime.policy.idle``, ``at.policy.keys``: an attribute named after the section, of an
expression naming a policy). The core sections (``fleet``, ``pricing``, ``notifications``, ...) are every
capability's, so naming one names none. The registry and the composed policy (``governor.policy``, whose typed view
declares every section for type checkers) are the composition, not an outsider.

:data:`KNOWN` lists what still names a capability from outside, each with its permanent reason: AWS's own word that
happens to be a capability's name, a word of a chart, a verdict or the simulator's workload, and a CLI command or
tooling built for one capability (the CLI, which the runtime never ships). The first test fails on any module that
starts naming a capability; the second when an entry no longer does (delete it then).
"""

from __future__ import annotations

import ast
from functools import cache

from governor.capability import Capability
from governor.core_policy import CorePolicy
from governor.registry import REGISTRY
from tests.imports import import_statements, modules

#: The sections every capability may read (``governor.core_policy.CorePolicy``) and the file's own version.
CORE = frozenset({*(n for n in vars(CorePolicy) if not n.startswith("_")), "version", "audit"})
#: What puts the capabilities together: the list of their declarations, and the policy composed from it.
COMPOSITION = ("governor.registry", "governor.policy")

_AWS_SPOT = "AWS's word: the EC2 market and instance lifecycle 'spot', not the capability"
_IDLE_TOOLING = (
    "the idle policy's CLI tooling (backtest, simulator, history, soak): it lives in the CLI, which the runtime never "
    "ships (the Lambda asset is runtime only, issue 34 item 5), so not in the capability's package"
)
_WORKLOAD_KIND = "the simulator's workload kind 'idle' (a synthetic instance whose GPUs do nothing), not the capability"
_IDLE_BAND = "the charts' band and palette colour for idle GPU time (a word of the chart, not the capability)"
_CLI = "a CLI command for one capability (governor report, governor idle, ledger and status views)"

KNOWN: dict[str, tuple[frozenset[str], str]] = {
    "governor.domain.capacity": (
        frozenset({"lifecycle", "spot"}),
        _AWS_SPOT + "; EC2's word 'lifecycle' (InstanceLifecycle) in a purchase model's evidence",
    ),
    "governor.domain.fleet": (frozenset({"spot"}), _AWS_SPOT),
    "governor.lifecycle.domain": (frozenset({"spot"}), _AWS_SPOT),
    "governor.lifecycle.explain": (frozenset({"spot"}), _AWS_SPOT),
    "governor.domain.costs": (frozenset({"spot"}), _AWS_SPOT),
    "governor.domain.facts": (
        frozenset({"lifecycle", "report"}),
        "EC2's word 'lifecycle' (InstanceLifecycle) in a usage session, priced by it; 'report', the action path of "
        "capacity that is only reported (issue 48: the one record per resource)",
    ),
    "governor.domain.interruptions": (
        frozenset({"spot"}),
        _AWS_SPOT + " (an interrupted instance's InstanceLifecycle in the shared interruption record)",
    ),
    "governor.idle.purchase": (frozenset({"report", "spot"}), _AWS_SPOT + "; a 'report' option value (asg_action)"),
    "governor.idle.decide": (frozenset({"report"}), "a warning's 'planned: report' word"),
    "governor.idle.policy": (
        frozenset({"report"}),
        "a 'report' option value (asg_action, reserved_capacity, a cluster's reclaim), not the capability",
    ),
    "governor.spot.domain": (frozenset({"lifecycle"}), "EC2's word: an instance's lifecycle ('spot'/'scheduled')"),
    "governor.report.capability": (
        frozenset({"notifier"}),
        "within='notifier': the report's construct is built inside the notifier's, so its resources keep the "
        "CloudFormation logical ids they were deployed with (a new id replaces the function, schedules and bucket)",
    ),
    "governor.report.chart_image": (frozenset({"idle"}), _IDLE_BAND),
    "governor.report.charts": (frozenset({"idle"}), _IDLE_BAND),
    "governor.report.render.html_page": (frozenset({"idle"}), "the charts' palette colour for idle GPU time"),
    "governor.interactions.domain": (frozenset({"report"}), "a warn action's 'planned: report' word (no Stop now)"),
    "governor_cli.backtest_cloudwatch": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.commands.backtest": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.commands.explain": (
        frozenset({"idle"}),
        "explain --instances previews the idle sweep, the one capability judged on a schedule, not on an event "
        "(issue 38: a capacity-block, reserved, HyperPod or scarce instance's decision)",
    ),
    "governor_cli.commands.idle": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.history": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.sim.columnar": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.sim.container_insights_export": (
        frozenset({"idle"}),
        _IDLE_TOOLING + " (backtest's and explain's Container Insights input: idle's cluster settings)",
    ),
    "governor_cli.explain_nodes": (frozenset({"idle"}), _IDLE_TOOLING + " (explain --metrics: EKS nodes)"),
    "governor_cli.sim.prometheus_export": (frozenset({"idle"}), _IDLE_TOOLING + " (the backtest's Prometheus input)"),
    "governor_cli.sim.metrics_file": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.sim.parquet": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.sim.replay": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.sim.loaded": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.sim.csv_arrow": (frozenset({"idle"}), _IDLE_TOOLING + " (the backtest's CSV reader)"),
    "governor_cli.sim.spill": (frozenset({"idle"}), _IDLE_TOOLING + " (the backtest's partition files)"),
    "governor_cli.sim.workload": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.testing.idle_soak": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.testing.idle_clock": (frozenset({"idle"}), _IDLE_TOOLING),
    "governor_cli.testing.drain_scenarios": (
        frozenset({"idle"}),
        "issue 46's Kubernetes drain fault scenarios, through the idle function that drains",
    ),
    "governor_cli.testing.runbook": (
        frozenset({"idle"}),
        "the soak's runbook: replays, then idle's stale-outbox sweep",
    ),
    "governor_cli.testing.fault_scenarios": (
        frozenset({"idle", "notifier", "spot"}),
        "issue 35's fault scenarios, each through the capability it breaks",
    ),
    "governor_cli.commands.ledger": (frozenset({"idle", "lifecycle", "notifier", "report", "spot"}), _CLI),
    "governor_cli.commands.report": (frozenset({"report"}), _CLI),
    "governor_cli.commands.status": (frozenset({"idle", "report"}), _CLI),
    "governor_cli.fleet_status": (frozenset({"idle"}), _CLI + " (governor status --table: the idle marks)"),
    "governor_cli.main": (frozenset({"idle", "report"}), _CLI),
    "governor_cli.cost.measure": (
        frozenset({"idle", "keys", "lifecycle", "network", "notifier", "report", "securityhub", "spot"}),
        "the footprint measurement behind governor cost (issue 50): each function's typical invocation on the "
        "emulator, a scenario per function by nature (CLI tooling, never shipped)",
    ),
    "governor_cli.cost.meter": (
        frozenset({"securityhub"}),
        "AWS's word: botocore's service name of the Security Hub API (BatchImportFindings), not the capability",
    ),
    "governor_cli.demo.run": (
        frozenset({"idle", "spot"}),
        _AWS_SPOT + " (the fleet's Spot launches: RunInstances' InstanceMarketOptions); " + _WORKLOAD_KIND,
    ),
}


def _owns(capability: Capability, module: str) -> bool:
    """Its package, its construct module and its scenario hooks (``demo``, a module or a package) are its own."""
    construct = capability.construct.partition(":")[0]
    package = capability.package
    own = (package, *([capability.demo] if capability.demo else []))
    return module in (*own, construct, *COMPOSITION) or module.startswith(tuple(m + "." for m in own))


def _names(capability: Capability, imported: str) -> bool:
    """Importing its package, its construct module or its scenario hooks names the capability."""
    own = (capability.package, capability.construct.partition(":")[0], *([capability.demo] if capability.demo else []))
    return any(imported == m or imported.startswith(m + ".") for m in own)


def _imported(module: str) -> set[str]:
    found: set[str] = set()
    for node in import_statements(module, typing=True):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif node.module and not node.level:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


def _read_sections(tree: ast.Module) -> set[str]:
    """The names of the attributes read of an expression naming a policy (``policy.idle``, ``self.policy.keys``)."""
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and "policy" in ast.unparse(node.value).lower()
    }


@cache
def named() -> dict[str, frozenset[str]]:
    """Module -> the capabilities it names from outside their packages."""
    found: dict[str, frozenset[str]] = {}
    for module, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        words = (literals | _read_sections(tree)) - CORE
        imported = _imported(module)
        names = frozenset(
            c.name
            for c in REGISTRY.values()
            if not _owns(c, module)
            and (words & {c.name, c.section, *c.policies} or any(_names(c, i) for i in imported))
        )
        if names:
            found[module] = names
    return found


def test_no_module_outside_a_capability_names_it() -> None:
    unexpected = {module: sorted(names - KNOWN.get(module, (frozenset(), ""))[0]) for module, names in named().items()}
    assert {m: n for m, n in unexpected.items() if n} == {}


def test_every_known_exception_still_holds() -> None:
    stale = {m: sorted(caps - named().get(m, frozenset())) for m, (caps, _) in KNOWN.items()}
    assert {m: c for m, c in stale.items() if c} == {}


def test_each_exception_says_why() -> None:
    """Every module still naming a capability from outside does so for a permanent reason, printed here (``pytest
    -rP`` shows them)."""
    for module, (caps, reason) in sorted(KNOWN.items()):
        assert reason.strip(), module
        print(f"{module} names {', '.join(sorted(caps))}: {reason}")


def test_the_registry_names_each_capability_once_with_what_varies() -> None:
    """Each entry names its construct and id; every finding policy belongs to one capability."""
    policies = [p for c in REGISTRY.values() for p in c.policies]
    assert len(policies) == len(set(policies))
    for capability in REGISTRY.values():
        assert capability.construct.count(":") == 1 and capability.construct_id
        assert capability.within is None or capability.within in REGISTRY


def test_what_the_report_reads_by_capability_is_declared_once() -> None:
    """One capability's decisions are the fleet's idle GPU time, read with the policies its entry gives its findings;
    one keeps the usage sessions and raises untagged spend as its own finding."""
    idle_time = REGISTRY.idle_time()
    (declaring,) = [c for c in REGISTRY.values() if c.idle_time]
    assert idle_time.policies == frozenset(declaring.policies)
    assert declaring.idle_time.startswith(declaring.package + ".")
    keeper = REGISTRY.session_keeper()
    assert all(problem.startswith(f"{keeper.policies[0]}.") for problem in keeper.ownership_problems)
