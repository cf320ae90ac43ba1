"""How the keys capability's findings read in the report: the fix for each rule, naming the policy's own fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from governor.domain.problems import Problem, default_problems
from governor.policy import Policy, policy_field


def remediation(rule: str, policy: Policy) -> str:
    """One sentence per rule family; every setting it names is a field of governor.yaml."""
    keys = policy.keys
    if ".secret." in rule:
        return (
            "Turn on the secret's rotation with an interval of at most "
            f"{policy_field('keys.secret_max_rotation_days')} ({keys.secret_max_rotation_days} days)."
        )
    if rule == "keys.access_key.root":
        return "Delete the root user's access key and use an IAM role instead."
    if ".access_key." in rule:
        return (
            "Rotate the IAM access key (create a new one, switch, then deactivate the old one) within "
            f"{policy_field('keys.access_key_max_age_days')} ({keys.access_key_max_age_days} days)."
        )
    if ".kms." in rule:
        return (
            "Enable automatic rotation on the KMS key with a period of at most "
            f"{policy_field('keys.kms_max_rotation_days')} ({keys.kms_max_rotation_days} days)."
        )
    return "Read the decision's reasons in the ledger (governor ledger export)."


def problems(decision: Mapping[str, Any], policy: Policy) -> list[Problem]:
    """One problem per rule."""
    return default_problems(decision, remediation(str(decision.get("rule") or ""), policy))
