"""GovernorStack composes the shared resources, the audit lake, one construct per registry entry and the operator
roles, and nothing else."""

from __future__ import annotations

from aws_cdk import CfnOutput, Environment, Stack
from constructs import Construct

from governor.policy import Policy
from governor.registry import REGISTRY
from infra.constructs.audit import AuditLake
from infra.constructs.function import GovernorFunction, construct_class
from infra.constructs.operators import OperatorRoles
from infra.constructs.organization import OrganizationHub
from infra.constructs.shared import SharedResources
from infra.environment import check_environments
from infra.settings import Settings
from infra.stacks.spoke import synthesize_spoke


class GovernorStack(Stack):
    """Everything GPU Fleet Governor deploys into one account and region."""

    def __init__(
        self, scope: Construct, construct_id: str, *, policy: Policy, settings: Settings, env: Environment | None = None
    ) -> None:
        super().__init__(
            scope, construct_id, description="GPU Fleet Governor: governance and cost control for GPU fleets", env=env
        )
        self.policy = policy
        self.settings = settings
        self.shared = SharedResources(self, "Shared", policy=policy, bus_name=settings.bus_name)
        self.functions: dict[str, GovernorFunction] = {}
        # Capabilities, one construct each; every construct registers its functions in self.functions.
        # The trail is multi-region, so only the audit region's stack holds it (and the lake and reports over it).
        self.audit = (
            AuditLake(self, "Audit", policy=policy, settings=settings, shared=self.shared)
            if settings.holds_audit
            else None
        )
        self.capabilities: dict[str, Construct] = {}
        for capability in REGISTRY.values():  # one construct per registry entry, in the registry's order
            within = self.capabilities[capability.within] if capability.within else self
            self.capabilities[capability.name] = construct_class(capability)(
                within,
                capability.construct_id,
                shared=self.shared,
                policy=policy,
                settings=settings,
                functions=self.functions,
                audit=self.audit,
            )
        OperatorRoles(self, "Operators", shared=self.shared, policy=policy)  # last: it grants on what exists
        # Organisation mode (opt-in): after everything else, since the spokes forward the triggers and carry the
        # grants registered above.
        self.organization = (
            OrganizationHub(
                self,
                "Organization",
                policy=policy,
                organization=settings.organization,
                functions=self.functions,
                bus_name=settings.bus_name,
                context=dict(self.node.get_all_context()),  # the same feature flags for the spoke
                key=self.shared.key,
                spoke=synthesize_spoke,
            )
            if settings.organization is not None
            else None
        )
        # Last: every function's environment is complete now (constructs and the hub add variables after creating it).
        check_environments(
            (name, function.function, function.capability.environment_sections)
            for name, function in sorted(self.functions.items())
        )
        self._outputs()

    def _outputs(self) -> None:
        """What an operator needs after the deploy: where alarms go, and the table ``governor ledger export`` reads."""
        CfnOutput(
            self,
            "AlarmTopicArn",
            value=self.shared.alerts.topic_arn,
            description="SNS topic every governor alarm publishes to: subscribe your on-call email or chat here",
        )
        CfnOutput(
            self,
            "LedgerTableName",
            value=self.shared.ledger.table_name,
            description="Decision ledger (governor ledger export --table <this>)",
        )
        CfnOutput(self, "GovernorBusName", value=self.shared.bus.event_bus_name, description="Findings event bus")
        if self.audit is not None:
            CfnOutput(
                self,
                "AuditWorkGroup",
                value=self.audit.workgroup_name,
                description="Athena workgroup holding the named audit queries",
            )
