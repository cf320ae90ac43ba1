"""Daily and weekly security and cost report: Athena queries over CloudTrail, the ledger, a chart, S3 archive.

``handler`` is the Lambda entry and ``domain`` the report's periods; the report itself is built in layers:
``model`` (what one report says), ``sections`` (each section from plain data), ``build`` (assembly, trends, a team's
digest) and ``render`` (formatting, CSV, HTML, Slack and text). ``athena``, ``archive`` and ``chart_image`` are this
capability's AWS adapters. Registered once in ``governor.registry``. Imports nothing, so importing a sibling module
stays cheap."""
