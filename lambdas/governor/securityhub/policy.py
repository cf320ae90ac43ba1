"""The ``securityhub`` section of governor.yaml, declared here (the registry entry names it; ``governor.policy`` adds it
to ``Policy``)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from governor.domain.model import Model

SECTION = "securityhub"


class SecurityHubPolicy(Model):
    """Report-only unless ``enforce``: it builds and records each export, and writes nothing.

    ``enforce`` writes each finding as an OCSF Detection Finding (class 2004) to the function's log (one JSON line, for
    a log subscription) and, when ``ocsf_bucket`` names a bucket (a Security Lake custom source's, or your own),
    as one object under ``ocsf_prefix``; with ``asff`` it also imports the finding into Security Hub (ASFF,
    BatchImportFindings, this account's default product)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    enforce: bool = False
    asff: bool = False
    ocsf_bucket: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    ocsf_prefix: str = Field("ocsf", pattern=r"^[A-Za-z0-9!_.*'()/-]{1,200}$")

    @classmethod
    def of(cls, policy: Any) -> SecurityHubPolicy:
        """This section of a composed ``Policy`` (its defaults when the policy object predates the section)."""
        section = getattr(policy, SECTION, None)
        return section if isinstance(section, cls) else cls()
