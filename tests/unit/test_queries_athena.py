"""Every library query as Athena receives it: valid Trino SQL, ``?`` parameters only in WHERE clauses (Athena's
documented limit, "Use parameterized queries"), at most 25 of them (the console's limit), and the named-query form
the console can run. DuckDB runs the same files over the project's CloudTrail records in tests/unit/test_audit.py.
"""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel

from governor.audit.queries import (
    ORDER_LINE,
    QuerySpec,
    console_form,
    list_queries,
    positional,
    scan_parameters,
    to_positional,
)

QUERIES = list_queries()
CONSOLE_MAX_PARAMETERS = 25

#: The pre-fix shape of gpu_instance_hours: :end bound in a SELECT list, which Athena rejects at run time.
SELECT_BOUND = """
SELECT instance_id,
       coalesce(lead(at) OVER (PARTITION BY instance_id ORDER BY at), from_iso8601_timestamp(:end)) AS ended
FROM transitions
WHERE at >= from_iso8601_timestamp(:start)
"""


def misplaced_parameters(sql: str) -> list[str]:
    """The SQL around every ``?`` that is not inside a WHERE clause."""
    statement, _ = to_positional(sql) if ":" in sql else (sql, [])
    tree = sqlglot.parse_one(statement, read="trino", error_level=ErrorLevel.RAISE)
    return [
        (placeholder.parent or placeholder).sql(dialect="trino")
        for placeholder in tree.find_all(exp.Placeholder)
        if placeholder.find_ancestor(exp.Where) is None
    ]


@pytest.mark.parametrize("spec", QUERIES, ids=[q.name for q in QUERIES])
def test_query_parses_as_trino_with_parameters_only_in_where(spec: QuerySpec) -> None:
    statement, names = to_positional(spec.sql)
    tree = sqlglot.parse_one(statement, read="trino", error_level=ErrorLevel.RAISE)
    assert len(list(tree.find_all(exp.Placeholder))) == len(names) > 0
    assert misplaced_parameters(spec.sql) == []
    assert len(names) <= CONSOLE_MAX_PARAMETERS


@pytest.mark.parametrize("spec", QUERIES, ids=[q.name for q in QUERIES])
def test_named_query_form_runs_in_the_console_and_in_the_report(spec: QuerySpec) -> None:
    deployed = console_form(spec.sql)
    assert scan_parameters(deployed) == []  # no :name left outside comments: Athena knows only ?
    assert deployed.startswith(ORDER_LINE)
    statement, names = positional(deployed)
    assert names == to_positional(spec.sql)[1]
    assert statement.count("?") >= len(names)
    sqlglot.parse_one(statement, read="trino", error_level=ErrorLevel.RAISE)


def test_a_parameter_in_a_select_list_is_caught() -> None:
    assert misplaced_parameters(SELECT_BOUND) == ["FROM_ISO8601_TIMESTAMP(?)"]


def test_gpu_instance_hours_binds_the_range_end_only_in_where() -> None:
    spec = next(q for q in QUERIES if q.name == "gpu_instance_hours")
    _, names = to_positional(spec.sql)
    assert names.count("end") >= 4 and misplaced_parameters(spec.sql) == []
