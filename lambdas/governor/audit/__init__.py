"""The audit lake's query library (``queries``, ``schema``), shared by Athena in the cloud (``governor.report.athena``)
and the local DuckDB engine (``engine``, for ``governor audit`` and ``governor report``).

Imports nothing, so the report function loads the query library without the local engine (DuckDB is not in the
Lambda layer, and the code asset leaves ``engine`` out: ``infra/asset.py``).
"""
