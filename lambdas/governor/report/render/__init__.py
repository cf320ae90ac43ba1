"""The report's renderings of ``report.model``: ``format`` (how a value, a title and today's to-do read, shared by all),
``csv_files``, ``html_page`` and ``slack`` (the Slack digest and the email's plain text). Imports nothing, so a caller
loads only the renderings it uses."""
