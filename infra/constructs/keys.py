"""The keys enforcer: one function, a daily schedule, one CloudTrail rule, and IAM scoped to this account's keys,
users and secrets.

IAM management events reach EventBridge only in us-east-1, so the IAM part of the rule fires only when the stack is
deployed there; the daily sweep covers IAM from any region (IAM is global).
"""

from __future__ import annotations

from typing import Unpack

import jsii
from aws_cdk import ArnFormat, IStableListProducer, Lazy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from governor.keys.events import RULE_EVENTS
from governor.policy import Policy
from governor.registry import REGISTRY
from infra.constructs.delivery import secret_arns
from infra.constructs.function import CapabilityArgs, CapabilityConstruct, successful_calls
from infra.nag import acknowledge_wildcard

UNSCOPED = {
    "kms:ListKeys": "ListKeys has no resource-level permissions: it lists every key in the account and region.",
    "iam:GenerateCredentialReport": "The credential report is account-wide; IAM allows no resource for it.",
    "iam:GetCredentialReport": "The credential report is account-wide; IAM allows no resource for it.",
    "secretsmanager:ListSecrets": "ListSecrets has no resource-level permissions in Secrets Manager.",
}


def scoped_actions(service: str, declared: frozenset[str]) -> list[str]:
    """The registered actions for ``service`` minus the unscopable ones, sorted for a stable template."""
    return sorted(a for a in declared if a.startswith(f"{service}:") and a not in UNSCOPED)


class KeysEnforcer(CapabilityConstruct):
    """Keeps KMS keys, IAM access keys and secrets rotated within the ``keys`` policy, daily and on CloudTrail calls."""

    CAPABILITY = REGISTRY["keys"]
    FUNCTION_ID = "Keys"

    def __init__(self, scope: Construct, construct_id: str, **args: Unpack[CapabilityArgs]) -> None:
        super().__init__(scope, construct_id, **args)
        stack = Stack.of(self)
        function = self.function
        declared = self.capability.permissions(self.policy)
        # The governor's own key rotates within the period this policy holds every customer key to.
        own_key = self.shared.key.node.default_child
        assert isinstance(own_key, kms.CfnKey)
        own_key.rotation_period_in_days = self.policy.keys.kms_max_rotation_days
        self.on_schedule("Sweep")
        self.on_rule(
            "CloudTrailCalls",
            successful_calls(sorted(RULE_EVENTS), sorted({name for names in RULE_EVENTS.values() for name in names})),
        )

        key_arns = stack.format_arn(service="kms", resource="key", resource_name="*")
        user_arns = stack.format_arn(service="iam", region="", resource="user", resource_name="*")
        secret_arns = stack.format_arn(
            service="secretsmanager", resource="secret", resource_name="*", arn_format=ArnFormat.COLON_RESOURCE_NAME
        )
        function_arns = stack.format_arn(
            service="lambda", resource="function", resource_name="*", arn_format=ArnFormat.COLON_RESOURCE_NAME
        )
        services = {action.split(":")[0] for action in declared}
        unscoped = services - {"kms", "iam", "secretsmanager", "lambda"}
        if unscoped:
            raise ValueError(f"keys: no resource scope for registered {sorted(unscoped)} actions")
        function.add_statement(scoped_actions("kms", declared), [key_arns])
        function.add_statement(scoped_actions("iam", declared), [user_arns])
        function.add_statement(scoped_actions("secretsmanager", declared), [secret_arns])
        function.add_statement(scoped_actions("lambda", declared), [function_arns])
        function.add_unscoped_statement(
            "AccountWideReads",
            sorted(a for a in UNSCOPED if a in declared),
            "Account-wide listings AWS cannot scope to a resource: " + " ".join(sorted(set(UNSCOPED.values()))),
        )
        acknowledge_wildcard(
            function.role,
            key_arns,
            "Any customer key in this account and region may be created after deploy; the sweep checks them all. "
            "The actions are the rotation reads plus EnableKeyRotation/RotateKeyOnDemand, nothing that uses or "
            "deletes a key.",
        )
        acknowledge_wildcard(
            function.role,
            user_arns,
            "Access keys of any IAM user in this account are governed; the only change is UpdateAccessKey (to "
            "Inactive, by the code). No role, policy or group is reachable.",
        )
        acknowledge_wildcard(
            function.role,
            secret_arns,
            "Every secret in this account and region is governed; DescribeSecret and RotateSecret only, never "
            "GetSecretValue.",
        )
        acknowledge_wildcard(
            function.role,
            function_arns,
            "RotateSecret requires the caller to be allowed to invoke the secret's own rotation function, which "
            "secret owners choose after deploy; limited to functions in this account and region, and denied on every "
            "function of this stack (policy NotTheGovernorsOwn).",
        )
        self._not_the_governors_own()

    def _not_the_governors_own(self) -> None:
        """Explicit denies next to the broad grants: the keys role never invokes one of the governor's own functions
        (idle's Stop now, the Slack endpoint...) and never rotates or reads the governor's own Slack secrets.

        A policy of its own (not the role's default one): naming the keys function's own ARN there would make the
        function depend on itself.
        """
        stack = Stack.of(self)
        secrets = secret_arns(self, governor_secret_names(self.policy))
        policy = iam.Policy(
            self,
            "NotTheGovernorsOwn",
            statements=[
                iam.PolicyStatement(
                    sid="NeverInvokeTheGovernorsFunctions",
                    effect=iam.Effect.DENY,
                    actions=["lambda:InvokeFunction"],
                    resources=Lazy.list(_GovernorFunctionArns(stack)),
                ),
                iam.PolicyStatement(
                    sid="NeverTouchTheGovernorsSecrets",
                    effect=iam.Effect.DENY,
                    actions=["secretsmanager:GetSecretValue", "secretsmanager:RotateSecret"],
                    resources=secrets,
                ),
            ],
        )
        self.function.role.attach_inline_policy(policy)


def governor_secret_names(policy: Policy) -> list[str]:
    """Every secret the governor itself reads (registry ``secrets``): the Slack webhooks, the signing secret and the
    bot token."""
    return REGISTRY.secret_names(policy)


@jsii.implements(IStableListProducer)
class _GovernorFunctionArns:
    """Resolves, at synth time, to the ARNs of every governor function in the stack (built after this construct)."""

    def __init__(self, stack: Stack) -> None:
        self._stack = stack

    def produce(self) -> list[str] | None:
        from infra.constructs.function import GovernorFunction

        functions = [n for n in self._stack.node.find_all() if isinstance(n, GovernorFunction)]
        # By construct path: an ARN token's text depends on the process's history, a path does not. ``<arn>:*`` too:
        # Invoke on a version or alias ARN (``function:Name:1``, ``function:Name:live``) is matched against the
        # qualified ARN, which the allow's ``function:*`` covers and the bare ARN does not.
        arns = [f.function.function_arn for f in sorted(functions, key=lambda f: f.node.path)]
        return [arn for function_arn in arns for arn in (function_arn, f"{function_arn}:*")]
