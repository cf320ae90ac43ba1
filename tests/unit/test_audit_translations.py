"""The query library's DuckDB translations are made ahead of time (issue 24): a run does not load sqlglot.

``lambdas/governor/audit/translated.json`` must be what sqlglot makes of today's query files; after editing a query,
``python -m governor_cli.audit_translations --write-translations`` refreshes it (this test says so when it is stale).
"""

from __future__ import annotations

import json
import subprocess
import sys

from governor.audit import engine
from governor.audit.queries import list_queries
from tests.conftest import CLOUDTRAIL_DIR


def test_the_shipped_translations_are_sqlglots_for_every_library_query() -> None:
    shipped = json.loads(engine.TRANSLATIONS.read_text(encoding="utf-8"))
    fresh = engine.translations()
    assert shipped["queries"] == fresh["queries"], (
        "stale: run python -m governor_cli.audit_translations --write-translations"
    )
    assert {entry["name"] for entry in shipped["queries"].values()} == {spec.name for spec in list_queries()}


def test_a_query_outside_the_library_is_still_translated() -> None:
    sql = "SELECT date_add('day', 1, from_iso8601_timestamp(:start)) AS t"
    assert engine.translate(sql) == engine.transpile(sql)
    assert "$start" in engine.translate(sql)


def test_an_audit_run_over_the_library_does_not_load_sqlglot() -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from governor.audit.engine import run_audit\n"
        f"run = run_audit(Path({str(CLOUDTRAIL_DIR)!r}))\n"
        "assert run.records and len(run.results) == 20, run.results.keys()\n"
        "print('sqlglot' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
