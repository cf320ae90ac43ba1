"""The ``lifecycle`` section of governor.yaml, declared here (the registry entry names it; ``governor.policy`` adds it
to ``Policy``). What instances cost is the core ``pricing`` section's: the report and idle read it too."""

from __future__ import annotations

from governor.policy_types import Schedule, Section, TagKey


class LifecyclePolicy(Section):
    """Know who launched each GPU instance; tag launches and keep usage sessions (priced from ``pricing``)."""

    enforce: bool = False
    creator_tag: TagKey = "governor:creator"
    launched_at_tag: TagKey = "governor:launched-at"
    reconcile_schedule: Schedule = "rate(1 day)"

    moved_keys = dict.fromkeys(
        ("use_price_list_api", "effective_rates", "effective_rate_days", "cur", "prices_as_of", "prices"), "pricing"
    )
