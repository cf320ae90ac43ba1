"""The Security Hub export: the ``securityhub`` function on the governor bus, allowed BatchImportFindings on this
account's default product only (with ``securityhub.asff``) and PutObject only under the OCSF prefix of the bucket
``securityhub.ocsf_bucket`` names (when it names one)."""

from __future__ import annotations

from typing import Unpack

from aws_cdk import Stack
from constructs import Construct

from governor.registry import REGISTRY
from governor.securityhub.hub import ARCHIVE_ACTIONS, IAM_ACTIONS
from governor.securityhub.policy import SecurityHubPolicy
from infra.constructs.function import CapabilityArgs, CapabilityConstruct


class SecurityHubExport(CapabilityConstruct):
    """Every governor finding to the export: OCSF to the log (and a named bucket), ASFF to Security Hub."""

    CAPABILITY = REGISTRY["securityhub"]
    FUNCTION_ID = "SecurityHub"

    def __init__(self, scope: Construct, construct_id: str, **args: Unpack[CapabilityArgs]) -> None:
        super().__init__(scope, construct_id, **args)
        stack = Stack.of(self)
        section = SecurityHubPolicy.of(self.policy)
        self.on_findings("Findings", "Every governor finding to the Security Hub export")
        if section.asff:
            # The account's own default product: an account imports findings about itself only (the SAR's
            # "product" resource type: arn:${Partition}:securityhub:${Region}:${Account}:product/${Company}/${Id}).
            product = stack.format_arn(
                service="securityhub", resource="product", resource_name=f"{stack.account}/default"
            )
            self.function.add_statement(IAM_ACTIONS, [product])
        if section.ocsf_bucket:
            objects = stack.format_arn(
                service="s3",
                region="",
                account="",
                resource=section.ocsf_bucket,
                resource_name=f"{section.ocsf_prefix.strip('/')}/*",
            )
            self.function.add_statement(
                ARCHIVE_ACTIONS,
                [objects],
                reason="Each OCSF finding is one object under the export prefix; its key holds the day and the "
                "finding's id, known only at run time. PutObject only.",
            )
