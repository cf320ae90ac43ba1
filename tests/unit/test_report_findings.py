"""The report's findings and to-do list as a team lead acts on them (issue 37): one row per resource and problem, each
with its own reason and fix; fixes that name real governor.yaml fields and never advise stopping what nobody
measured; the to-do list ordered by severity, then money at stake per day, then age, with the money shown."""

from __future__ import annotations

import re
from typing import Any

import pytest

from governor.idle import findings as idle_findings
from governor.idle.costs import IDLE_STATUSES
from governor.network.domain import decide_group
from governor.network.events import IngressRule, Source
from governor.policy import Policy, policy_field
from governor.report.render.format import todo_items
from governor.report.render.slack import render_text
from governor.report.sections.findings import problems_of
from tests.unit.test_report import _idle, _session, at
from tests.unit.test_report_views import report_over

GROUP = "sg-0training0000001"


def _network(hour: float, protocol: str, low: int, high: int, source: str, rule_id: str) -> dict[str, Any]:
    rule = IngressRule(GROUP, protocol, low, high, Source("cidr", source), rule_id=rule_id)
    decision = decide_group(GROUP, [rule], Policy(), tags={}, group_name="gpu-training")
    return {**decision.model_dump(mode="json"), "kind": "decision", "at": at(hour)}


def ssh_then_training_port() -> list[dict[str, Any]]:
    """The demo's training group: SSH opened to the world at 18:00, a training port to a VPC range at 18:10."""
    return [
        _network(18, "tcp", 22, 22, "0.0.0.0/0", "sgr-ssh"),
        _network(18 + 10 / 60, "tcp", 2222, 2223, "10.20.0.0/16", "sgr-train"),
    ]


def test_each_problem_of_a_group_is_its_own_finding_with_its_own_reason_and_fix() -> None:
    report = report_over(ssh_then_training_port())
    ssh, training = report.findings
    assert (ssh.resource, ssh.severity, ssh.problem) == (GROUP, "critical", "tcp 22 from 0.0.0.0/0")
    assert "port 22 to the world" in ssh.summary and "world-open rule" in ssh.remediation
    assert (training.severity, training.problem) == ("warning", "tcp 2222-2223 from 10.20.0.0/16")
    assert "training port 2222-2223 to 10.20.0.0/16" in training.summary
    assert "world" not in training.remediation and "security group itself" in training.remediation
    # The SSH exposure is item 1 of the to-do list, in the CSV's first row and in the digest.
    first = todo_items(report)[0]
    assert first.startswith("Critical: Opens tcp port 22 to the world") and GROUP in first
    assert report.findings_table().rows[0]["problem"] == "tcp 22 from 0.0.0.0/0"
    assert "port 22 to the world" in render_text(report).split("training port")[0]


def test_a_revoked_rule_resolves_only_its_own_finding() -> None:
    items = ssh_then_training_port()
    fixed = _network(19, "tcp", 22, 22, "0.0.0.0/0", "sgr-ssh")
    for action in fixed["actions"]:
        action["enforced"] = True
    fixed["actions"] = [a for a in fixed["actions"] if a["type"] == "revoke_ingress"]
    report = report_over([*items, fixed])
    by_problem = {f.problem: f for f in report.findings}
    assert by_problem["tcp 22 from 0.0.0.0/0"].status == "resolved"
    assert by_problem["tcp 22 from 0.0.0.0/0"].resolution == "ingress revoked by the governor"
    assert by_problem["tcp 2222-2223 from 10.20.0.0/16"].status == "open"


# --- fixes name fields that exist -----------------------------------------------------------------------------------

SECTIONS = "|".join(Policy.model_fields)
FIELD = re.compile(rf"\b(?:{SECTIONS})\.[a-z_]+(?:\.[a-z_]+)*\b")


def _every_remediation() -> list[str]:
    """The fix of every rule each capability raises (from its own findings module), and the report's own."""
    rules = {
        "idle": [f"idle.{s}" for s in (*IDLE_STATUSES, "unmonitored", "stalled", "circuit-breaker")],
        "network": ["network.security-group", "network.public-ip"],
        "keys": [
            "keys.kms.rotation_off",
            "keys.kms.rotation_period_too_long",
            "keys.access_key.too_old",
            "keys.access_key.root",
            "keys.secret.no_rotation",
            "keys.secret.rotation_interval_too_long",
        ],
        "lifecycle": ["lifecycle.no-team", "lifecycle.launch", "lifecycle.governor-tag"],
        "spot": ["spot-interruption"],
        "budgets": ["budgets.threshold"],
    }
    texts = []
    for policy_name, names in rules.items():
        for rule in names:
            status = rule.split(".", 1)[1] if policy_name == "idle" else None
            decision = {"policy": policy_name, "rule": rule, "severity": "warning", "reasons": ["x"]}
            decision["evidence"] = {"status": status} if status else {}
            texts.extend(p.remediation for p in problems_of(decision, Policy()))
    texts.extend(p.remediation for item in ssh_then_training_port() for p in problems_of(item, Policy()))
    return texts


def test_every_fix_names_only_fields_of_the_policy_model() -> None:
    texts = _every_remediation()
    named = {match for text in texts for match in FIELD.findall(text)}
    assert {"network.protected_groups", "keys.secret_max_rotation_days"} <= named
    for path in named:
        policy_field(path)  # raises on a field the pydantic model does not have


@pytest.mark.parametrize("path", ["network.exemptions", "keys.max_secret_rotation_days", "idle.nope.deeper"])
def test_a_field_that_does_not_exist_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="no field"):
        policy_field(path)


def test_missing_gpu_data_is_never_answered_with_a_stop() -> None:
    reason = "gpu_utilization: 0 of 120 expected samples in the window (missing data is never idle)"
    item = _idle("i-0nodata", at(10), "unmonitored", 0.0, reason=reason)
    item.update(severity="warning", verdict="ok")
    [finding] = report_over([_session("i-0nodata", "g5.xlarge", 1, 1.006, "nlp", "bo", start=at(0)), item]).findings
    assert finding.problem == "unmonitored"
    assert not re.search(r"\bstop the instance\b", finding.remediation, re.IGNORECASE)
    assert "Do not stop it" in finding.remediation and "missing data is never idle" in finding.remediation
    assert "Stop the instance" in idle_findings.remediation("idle", Policy())


# --- money first ------------------------------------------------------------------------------------------------


def test_the_to_do_list_puts_the_most_money_at_stake_first_and_shows_it() -> None:
    """Three cheap g5.xlarge boxes idle since morning, two p5.48xlarge idle since the afternoon: the p5s come first."""
    items: list[dict[str, Any]] = []
    fleet = [("i-0g5a", "g5.xlarge", 1, 1.006, 2), ("i-0g5b", "g5.xlarge", 1, 1.006, 3)]
    fleet += [("i-0g5c", "g5.xlarge", 1, 1.006, 4), ("i-0p5a", "p5.48xlarge", 8, 98.32, 14)]
    fleet += [("i-0p5b", "p5.48xlarge", 8, 55.04, 15)]
    for instance, kind, gpus, price, idle_at in fleet:
        items.append(_session(instance, kind, gpus, price, "research", "dara", start=at(0)))
        items.append(_idle(instance, at(idle_at), "warned", 0.0))
    todo = todo_items(report_over(items), limit=3)
    assert todo[0].startswith("Warning:") and "i-0p5a" in todo[0] and "$2,359.68/day at stake" in todo[0]
    assert "i-0p5b" in todo[1] and "$1,320.96/day at stake" in todo[1]
    assert "i-0g5a" in todo[2] and "$24.14/day at stake" in todo[2]  # equal money: the oldest first
    assert todo[3] == "…and 2 more open findings in findings.csv."


def test_severity_still_comes_before_money() -> None:
    items = [
        _session("i-0p5a", "p5.48xlarge", 8, 98.32, "research", "dara", start=at(0)),
        _idle("i-0p5a", at(10), "warned", 0.0),
        *ssh_then_training_port(),
    ]
    report = report_over(items)
    assert [f.problem for f in report.open_findings][:2] == ["tcp 22 from 0.0.0.0/0", "idle"]
    assert report.open_findings[1].usd_per_day == pytest.approx(2359.68)


def test_a_stopped_instance_has_nothing_at_stake() -> None:
    items = [
        _session("i-0p5a", "p5.48xlarge", 8, 98.32, "research", "dara", start=at(0), end=at(12)),
        _idle("i-0p5a", at(10), "warned", 0.0),
    ]
    [finding] = report_over(items).open_findings
    assert finding.usd_per_day == 0.0
    assert "at stake" not in todo_items(report_over(items))[0]


def test_every_policy_field_named_in_the_runtime_exists() -> None:
    """Every ``policy_field("...")`` in the runtime's source, branches no test reaches included."""
    import ast

    from tests.conftest import ROOT

    named = []
    for path in (ROOT / "lambdas" / "governor").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "policy_field" and node.args:
                argument = node.args[0]
                assert isinstance(argument, ast.Constant), f"{path}: policy_field takes a literal"
                named.append(str(argument.value))
    assert len(named) >= 8
    for path in named:
        policy_field(path)


# --- untagged spend ---------------------------------------------------------------------------------------------


def test_an_instance_nobody_owns_is_a_finding_of_its_own_with_its_spend() -> None:
    """Issue 37, item 3: an unknown owner is a finding (untagged spend), not a blank, even when the box is busy."""
    items = [
        _session("i-0anon", "g5.12xlarge", 4, 5.672, "", "", start=at(0)),  # no owner tag, no recorded creator
        _session("i-0dara", "g5.12xlarge", 4, 5.672, "research", "dara", start=at(0)),
    ]
    report = report_over(items)
    [finding] = [f for f in report.open_findings if f.resource == "i-0anon"]
    assert finding.problem == "untagged" and finding.owner == "unknown" and finding.severity == "warning"
    assert "charged to nobody" in finding.summary and "$136.13" in finding.summary  # 24 h x $5.672
    assert finding.usd_per_day == pytest.approx(136.13)
    assert "owner" in finding.remediation and "team" in finding.remediation
    assert not [f for f in report.open_findings if f.resource == "i-0dara"]
    assert any("i-0anon" in line and "/day at stake" in line for line in todo_items(report))
