"""The ``notifier`` capability, declared: findings from the governor bus to Slack and email. Its switch is the core
``notifications`` section (where findings and reports go, which the report delivers through too)."""

from __future__ import annotations

from governor.capability import DELIVERY, Capability, Trigger
from governor.core_policy import NotificationsPolicy
from governor.domain.actions import Notify
from governor.events.findings import DETAIL_TYPE, SOURCE

CAPABILITY = Capability(
    name="notifier",
    demo="governor_cli.demo.capabilities.notifier",
    construct="infra.constructs.notifications:Notifications",
    construct_id="Notifications",
    finding_policies=("notifications",),
    section="notifications",
    section_model=NotificationsPolicy,
    description="Findings from the governor bus to Slack and email: routed, merged, within Slack's limits",
    triggers=(
        Trigger("Findings", "bus", f"{SOURCE} / {DETAIL_TYPE}"),
        Trigger(
            "Digest",
            "schedule",
            "each channel's digest of the findings held back (notifications.immediate)",
            schedule="notifications.digest_schedule",
        ),
    ),
    uses=DELIVERY,
    actions=(Notify,),
    # the webhooks; and the Slack app's bot token, for owners' mentions (users.lookupByEmail) and posts to a channel
    secrets=lambda policy: policy.notifications.slack_secret_names(),
    reads=frozenset({"slack_app"}),
    decides_on_resources=False,
    modes=("DELIVERS to Slack and email", "report-only: logs what it would send"),
)
