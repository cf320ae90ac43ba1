"""Findings from the governor bus to Slack and email: routed by the policy (never by a tag), merged.

``handler`` is the Lambda entry, ``domain`` the pure decisions (and the explainer); the other modules are
this capability's AWS adapters. Registered once in ``governor.registry``. Imports nothing, so importing a
sibling module stays cheap."""
