"""The ``securityhub`` capability, declared: every governor finding as OCSF and, with ``asff``, in Security Hub."""

from __future__ import annotations

from governor.capability import Capability, Trigger, Uses
from governor.core_policy import CorePolicy, section_of
from governor.events.findings import DETAIL_TYPE, SOURCE
from governor.securityhub.policy import SecurityHubPolicy


def _own(policy: CorePolicy) -> SecurityHubPolicy:
    return section_of(policy, "securityhub", SecurityHubPolicy)


CAPABILITY = Capability(
    name="securityhub",
    section="securityhub",
    section_model=SecurityHubPolicy,
    construct="infra.constructs.securityhub:SecurityHubExport",
    construct_id="SecurityHub",
    demo="governor_cli.demo.capabilities.securityhub",
    description="Every governor finding as an OCSF Detection Finding and, with asff, in Security Hub (ASFF)",
    triggers=(Trigger("Findings", "bus", f"{SOURCE} / {DETAIL_TYPE}"),),
    uses=(
        Uses("governor.securityhub.hub", when=lambda policy: bool(_own(policy).asff)),
        Uses("governor.securityhub.hub", ("ARCHIVE_ACTIONS",), when=lambda policy: bool(_own(policy).ocsf_bucket)),
    ),
    actions=(),
    modes=("EXPORTS OCSF (and ASFF to Security Hub with asff)", "report-only: builds the findings, writes nothing"),
)
