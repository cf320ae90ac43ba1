"""Governor tags not honoured: bad or unbounded exemptions and snoozes, marks the ledger does not back, checkpoint
names outside the allow-list, unproven Kubernetes claims. Each becomes a decision (and a finding), so a tag meant to
steer the governor is seen by people instead of silently obeyed or silently dropped. Pure.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from governor.domain.actions import Notify
from governor.domain.decision import Decision
from governor.domain.fleet import Instance, checkpoint_choice, tag_problems
from governor.idle.domain import POLICY, Mark, mark_tag_problems
from governor.idle.ownership import unproven_claim
from governor.policy import Policy


def _problems(instance: Instance, stored: Mark | None, policy: Policy, now: dt.datetime) -> list[str]:
    fleet = policy.fleet
    problems = [str(p) for p in (*tag_problems(instance.tags, fleet, now), *instance.refused_tags)]
    problems += [str(p) for p in mark_tag_problems(instance, stored, now)]
    claim = unproven_claim(instance.tags)
    if claim is not None:
        problems.append(str(claim))
    choice = checkpoint_choice(instance.tags, fleet, policy.idle.checkpoint_command)
    if choice.problem:
        problems.append(choice.problem)
    return problems


def ignored_tags(
    instances: list[Instance], stored: Mapping[str, Mark], policy: Policy, now: dt.datetime
) -> list[Decision]:
    """One decision per instance whose governor tags were not honoured, each tag's problem a reason."""
    decisions = []
    for instance in instances:
        problems = _problems(instance, stored.get(instance.id), policy, now)
        if not problems:
            continue
        decisions.append(
            Decision(
                policy=POLICY,
                verdict="act",
                resource=instance.id,
                actions=[Notify(enforced=policy.idle.enforce)],
                reasons=problems,
                evidence={"status": "tags-ignored", "tags": {k: v for k, v in instance.tags.items() if ":" in k}},
                severity="warning",
                rule="idle.tags-ignored",
            )
        )
    return decisions
