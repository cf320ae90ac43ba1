"""The report's sections, each computed from plain data (audit results, ledger items) into ``report.model``.

``security`` (the audit queries and who set the governor's own tags), ``cost`` (spend, idle, savings, Spot,
rightsizing), ``accounts`` (where each ledger item comes from, spend by account and region), ``findings`` (the
governor's open and resolved findings) and ``budgets``. Imports nothing, so a caller loads only the sections it uses.
"""
