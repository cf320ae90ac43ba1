"""Network policy: world-open ingress, training ports only from the same group, no public IPs on GPU instances.

``handler`` is the Lambda entry, ``domain`` the pure decisions (and the explainer); the other modules are
this capability's AWS adapters. Registered once in ``governor.registry``. Imports nothing, so importing a
sibling module stays cheap."""
