"""The audit lake's local side: the query library and the DuckDB engine that runs it over CloudTrail files."""

from governor.audit.engine import AuditRun, run_audit
from governor.audit.queries import QueryError, QuerySpec, list_queries

__all__ = ["AuditRun", "QueryError", "QuerySpec", "list_queries", "run_audit"]
