"""Reading only the columns the queries name changes no result: every library query on the real CloudTrail records
gives the same rows from the projected load as from a load of every column."""

from __future__ import annotations

from typing import Any

from governor.audit.engine import MISSING, LocalLake, discover, run_audit, used_columns, used_fields
from governor.audit.queries import QuerySpec, list_queries
from governor.audit.schema import COLUMNS
from tests.conftest import CLOUDTRAIL_DIR


def _all_columns_run(start: str, end: str) -> dict[str, dict[str, Any]]:
    lake = LocalLake()  # every column read
    try:
        lake.load(discover(CLOUDTRAIL_DIR))
        return {spec.name: lake.run(spec, {"start": start, "end": end}) for spec in list_queries()}
    finally:
        lake.close()


def test_projected_load_gives_the_same_results_as_a_full_one() -> None:
    projected = run_audit(CLOUDTRAIL_DIR)
    assert projected.records == 2900
    assert projected.results == _all_columns_run(projected.start, projected.end)
    assert sum(result["count"] for result in projected.results.values()) > 0


def test_only_named_columns_are_read_and_the_view_keeps_every_column() -> None:
    wanted = used_columns(list_queries())
    assert "eventname" in wanted and "useridentity" in wanted and "requestparameters" in wanted
    assert len(wanted) < len(COLUMNS)  # something is left unread
    lake = LocalLake(wanted)
    try:
        view = [str(row[0]) for row in lake.con.execute("DESCRIBE cloudtrail_logs").fetchall()]
        stored = [str(row[0]) for row in lake.con.execute("DESCRIBE cloudtrail_records").fetchall()]
    finally:
        lake.close()
    assert view[: len(COLUMNS)] == [column.name for column in COLUMNS]
    # plus the partitions and the placeholder column naming files without a Records array (never in the view)
    assert set(stored) - {"account", "region", "day", MISSING} == set(wanted)
    assert MISSING not in view


def test_only_named_struct_fields_are_kept_and_the_view_keeps_the_glue_types() -> None:
    fields = used_fields(list_queries())
    assert ("arn",) in fields["useridentity"] and ("sessioncontext",) not in fields["useridentity"]
    full = LocalLake()
    lake = LocalLake(used_columns(list_queries()), fields=fields)
    try:
        view = lake.con.execute("DESCRIBE cloudtrail_logs").fetchall()
        stored = {str(row[0]): str(row[1]) for row in lake.con.execute("DESCRIBE cloudtrail_records").fetchall()}
        assert view == full.con.execute("DESCRIBE cloudtrail_logs").fetchall()
    finally:
        lake.close()
        full.close()
    assert "sessioncontext" not in stored["useridentity"]


def test_a_struct_named_whole_is_read_whole() -> None:
    sql = "SELECT useridentity, e.useridentity.arn FROM cloudtrail_logs e"
    whole = QuerySpec(name="q", purpose="", cis=None, parameters=(), sql=sql, path=CLOUDTRAIL_DIR)
    assert () in used_fields([whole])["useridentity"]
    lake = LocalLake({"useridentity"}, fields=used_fields([whole]))
    try:
        stored = {str(row[0]): str(row[1]) for row in lake.con.execute("DESCRIBE cloudtrail_records").fetchall()}
    finally:
        lake.close()
    assert "sessioncontext" in stored["useridentity"]
