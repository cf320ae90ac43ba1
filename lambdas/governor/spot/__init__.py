"""Spot interruptions: checkpoint within the two-minute warning, record, notify, relaunch.

``handler`` is the Lambda entry, ``domain`` the pure decisions (and the explainer); the other modules are
this capability's AWS adapters. Registered once in ``governor.registry``. Imports nothing, so importing a
sibling module stays cheap."""
