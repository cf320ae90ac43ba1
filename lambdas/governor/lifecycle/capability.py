"""The ``lifecycle`` capability, declared: who launched each GPU instance, and its usage sessions."""

from __future__ import annotations

from governor.capability import Capability, Trigger, Uses
from governor.core_policy import section_of
from governor.domain.actions import Notify, Record, Tag
from governor.lifecycle.policy import LifecyclePolicy

CAPABILITY = Capability(
    name="lifecycle",
    demo="governor_cli.demo.capabilities.lifecycle",
    construct="infra.constructs.lifecycle:Lifecycle",
    construct_id="Lifecycle",
    member_accounts=True,
    fans_out=True,
    ownership_problems=frozenset({"lifecycle.no-team", "lifecycle.launch"}),  # governor.lifecycle.findings
    creator_tag=lambda policy: section_of(policy, "lifecycle", LifecyclePolicy).creator_tag,
    findings="governor.lifecycle.findings",
    section="lifecycle",
    section_model=LifecyclePolicy,
    description="Tags GPU launches with their creator and keeps GPU usage sessions for cost attribution",
    triggers=(
        Trigger("RunInstances", "rule", "successful RunInstances of GPU families (CloudTrail)"),
        Trigger(
            "GovernorTags",
            "rule",
            "CreateTags setting an exemption, snooze, checkpoint name or idle mark (CloudTrail): who and when",
        ),
        Trigger("StateChange", "rule", "EC2 instance running / stopping / stopped / shutting-down / terminated"),
        Trigger(
            "Reconcile",
            "schedule",
            "close usage sessions of vanished instances, open sessions for running GPU instances never seen starting",
            schedule="lifecycle.reconcile_schedule",
        ),
    ),
    uses=(
        Uses("governor.adapters.ec2"),
        Uses("governor.lifecycle.pricing", when=lambda policy: policy.pricing.use_price_list_api),
    ),
    actions=(Tag, Record, Notify),
    sections=("lifecycle", "pricing"),  # sessions are priced when they close
)
