"""Instance lifecycle: tags GPU launches with their creator and keeps GPU usage sessions for cost attribution.

``handler`` is the Lambda entry, ``domain`` the pure decisions (and the explainer); the other modules are
this capability's AWS adapters. Registered once in ``governor.registry``. Imports nothing, so importing a
sibling module stays cheap."""
