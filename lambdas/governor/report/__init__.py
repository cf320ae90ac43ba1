"""Daily and weekly security and cost report: Athena queries over CloudTrail, the ledger, a chart, S3 archive.

``handler`` is the Lambda entry, ``domain`` the pure decisions (and the explainer); the other modules are
this capability's AWS adapters. Registered once in ``governor.registry``. Imports nothing, so importing a
sibling module stays cheap."""
