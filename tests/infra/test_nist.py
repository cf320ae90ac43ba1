"""The stack with every feature switched on, checked by both cdk-nag packs (AWS Solutions and NIST 800-53 rev 5).

``infra/nag.py`` runs both packs on every synth; this app turns every policy option on, so constructs that exist only
when enabled are checked too. A finding is listed rule by rule, construct by construct. The same all-features template
is the least-privilege check for the options that change permissions: each role grants exactly what its registry
entry declares for this policy.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from governor.policy import Policy, parse_policy
from governor.registry import REGISTRY
from infra.app_builder import build_app
from tests.infra.policy_eval import role_policy
from tests.infra.test_least_privilege import registry_mismatches

EVERYTHING_ON: dict[str, Any] = {
    "idle": {
        "enforce": True,
        "checkpoint_command": "systemctl kill -s USR1 training",
        "cloudwatch_agent_association": True,
        "stopped": {"snapshot_and_terminate_after_days": 30},
    },
    "spot": {
        "enforce": True,
        "replacement": "on-demand",
        "fallback_instance_types": ["g5.2xlarge"],
        "fallback_zones": ["us-east-1b"],
    },
    "network": {"enforce": True},
    "keys": {"enforce": True, "rotate_on_demand": True},
    # cur: the CUR 2.0 table first, Cost Explorer after it (both grants), issue 38
    "lifecycle": {"enforce": True},
    "pricing": {
        "use_price_list_api": True,
        "effective_rates": "cur",
        "cur": {"database": "billing", "table": "cur2", "bucket": "example-billing", "prefix": "cur2/gpu-export"},
    },
    "audit": {"enforce": True},
    "reports": {"enforce": True, "email_recipients": ["platform@example.com"]},
    "notifications": {
        "enforce": True,
        "email_sender": "governor@example.com",
        "email_recipients": ["oncall@example.com"],
        "teams": {"vision": {"slack_secret_name": "governor/vision-slack", "email": ["vision@example.com"]}},
    },
}


class FullStack:
    """Synthesized once per module: the all-features template and the validation report of both packs."""

    def __init__(self, outdir: Path) -> None:
        self.policy: Policy = parse_policy(EVERYTHING_ON, source="all-features policy")
        app, stack = build_app(policy=self.policy, outdir=str(outdir))
        self.failed = False
        try:
            app.synth()
        except RuntimeError as error:  # jsii surfaces CDK's ValidationFailed as a RuntimeError
            if "validation-report.json" not in str(error):
                raise
            self.failed = True
        self.stack = stack
        self.template: dict[str, Any] = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
        self.report: dict[str, Any] = json.loads((outdir / "validation-report.json").read_text())

    def plugin(self, prefix: str) -> dict[str, Any]:
        return next(p for p in self.report["pluginReports"] if p["pluginName"].startswith(prefix))


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> FullStack:
    return FullStack(tmp_path_factory.mktemp("cdk.out.nist"))


def test_aws_solutions_pack_is_clean_with_every_feature_on(full: FullStack) -> None:
    solutions = full.plugin("AwsSolutions")
    problems = [
        f"{v['ruleName']}: {c['constructPath']}" for v in solutions["violations"] for c in v["violatingConstructs"]
    ]
    assert solutions["conclusion"] == "success", "\n".join(problems)


def test_every_role_grants_exactly_its_registered_permissions_with_every_feature_on(full: FullStack) -> None:
    """Options that add permissions (replacement, price list, email, scale-in...) are granted, and nothing else."""
    problems = registry_mismatches(full.template, full.policy)
    assert not problems, "\n".join(problems)
    spot = REGISTRY["spot"].permissions(full.policy) - REGISTRY["spot"].permissions(Policy())
    assert {"ec2:RunInstances", "iam:PassRole", "ec2:DescribeSubnets"} <= spot
    assert "pricing:GetProducts" in REGISTRY["lifecycle"].permissions(full.policy)
    assert "ses:SendEmail" in REGISTRY["notifier"].permissions(full.policy)


def test_nist_800_53_rev5_findings(full: FullStack) -> None:
    nist = full.plugin("NIST")
    by_rule: dict[str, list[str]] = defaultdict(list)
    for violation in nist["violations"]:
        for construct in violation["violatingConstructs"]:
            by_rule[violation["ruleName"]].append(construct["constructPath"])
    lines = [f"{rule} ({len(paths)}): {', '.join(sorted(paths))}" for rule, paths in sorted(by_rule.items())]
    assert not by_rule, "NIST 800-53 rev 5 findings:\n" + "\n".join(lines)
    assert nist["conclusion"] == "success"


def test_the_report_reads_the_named_cur_table_and_its_export_only(full: FullStack) -> None:
    """``effective_rates: cur``: Glue on that database and table, S3 read under the export's prefix, list only
    there; Cost Explorer stays granted as the next source."""
    [role_id] = [
        f["Properties"]["Role"]["Fn::GetAtt"][0]
        for f in full.template["Resources"].values()
        if f["Type"] == "AWS::Lambda::Function"
        and f["Properties"].get("Handler") == "governor.report.handler.lambda_handler"
    ]
    role = role_policy(full.template, role_id)
    glue = "arn:aws:glue:us-east-1:123456789012"
    assert role.allows("glue:GetTable", f"{glue}:table/billing/cur2")
    assert role.allows("glue:GetPartitions", f"{glue}:table/billing/cur2")
    assert not role.allows("glue:GetTable", f"{glue}:table/billing/other_table")
    assert role.allows("s3:GetObject", "arn:aws:s3:::example-billing/cur2/gpu-export/gpu/data/BILLING_PERIOD=2026-11/x")
    assert not role.allows("s3:GetObject", "arn:aws:s3:::example-billing/invoices/2026-11.pdf")
    assert role.allows("s3:ListBucket", "arn:aws:s3:::example-billing", **{"s3:prefix": "cur2/gpu-export/gpu/data/"})
    assert not role.allows("s3:ListBucket", "arn:aws:s3:::example-billing", **{"s3:prefix": "invoices/"})
    assert role.allows("s3:GetBucketLocation", "arn:aws:s3:::example-billing")
    assert role.allows("ce:GetCostAndUsage")
    assert not role.allows("s3:PutObject", "arn:aws:s3:::example-billing/cur2/gpu-export/x")
