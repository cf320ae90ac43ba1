"""The local audit engine: the Athena SQL files on DuckDB over CloudTrail files on disk.

Files are pruned by the delivery date in their key (one day of slack after the range) without being opened. The rest
are read by DuckDB's own ``read_json`` over the file list with the record schema given, so its JSON reader parses
each record straight into typed columns; only the columns the selected queries name are read (the others are typed
NULLs in the view, so every query still sees the Glue table's shape). The records are materialised once per run and
every query runs on that table, translated Trino -> DuckDB by sqlglot with bound parameters. A file DuckDB cannot read
is found by bisection, reported by name and skipped.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import decimal
import functools
import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from governor.audit.queries import QueryError, QuerySpec, iso, list_queries, parse_time, select_queries
from governor.audit.schema import COLUMNS, PARTITION_KEYS, TABLE_NAME, Column
from governor.domain.times import EARLIEST, LATEST

SLACK = dt.timedelta(days=1)
LAST_SECOND = dt.timedelta(seconds=1)  # parameters have whole seconds; [start, end) ends a second before end
RECORDS = "cloudtrail_records"
MISSING = "missing_records_file"
MAX_FILE_BYTES = 256 * 1024**2  # one CloudTrail file is one JSON object; real ones are a few MiB
BATCH_FILES = 512
ROW_GROUP_ROWS = 122_880  # DuckDB's row group (not settable for an in-memory database in DuckDB 1.4)
_AWSLOGS = re.compile(
    r"AWSLogs/(?:o-[a-z0-9]{10,32}/)?(?P<account>\d{12})/CloudTrail/(?P<region>[a-z0-9-]+)/"
    r"(?P<y>\d{4})/(?P<m>\d{2})/(?P<d>\d{2})/[^/]+$"
)
_FILE_NAME = re.compile(
    r"^(?P<account>\d{12})_CloudTrail_(?P<region>[a-z0-9-]+)_(?P<y>\d{4})(?P<m>\d{2})(?P<d>\d{2})T\d{4}Z"
)


@dataclass(frozen=True)
class LogFile:
    """A CloudTrail file and what its key says: account, region, delivery day (``None`` when the key says nothing)."""

    path: Path
    account: str | None
    region: str | None
    day: dt.date | None


@dataclass
class AuditRun:
    """What one local audit found: rows per query, the files skipped (and why), and how many files it opened."""

    results: dict[str, dict[str, Any]]
    skipped: list[tuple[str, str]]
    files_opened: int
    files_pruned: int = 0
    records: int = 0
    start: str = ""
    end: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    # Each query's column names, known even when it returned no rows (a CSV still gets its header row).
    columns: dict[str, list[str]] = field(default_factory=dict)


def describe_file(path: Path) -> LogFile:
    """Account, region and delivery day from an ``AWSLogs/...`` key or a CloudTrail file name."""
    text = path.as_posix()
    match = _AWSLOGS.search(text) or _FILE_NAME.match(path.name)
    if not match:
        return LogFile(path, None, None, None)
    try:
        day = dt.date(int(match["y"]), int(match["m"]), int(match["d"]))
    except ValueError:
        return LogFile(path, match["account"], match["region"], None)
    return LogFile(path, match["account"], match["region"], day)


def discover(logs: Path) -> list[LogFile]:
    """Every ``.json`` / ``.json.gz`` file under ``logs`` (or ``logs`` itself), sorted for stable output."""
    if logs.is_file():
        return [describe_file(logs)]
    if not logs.is_dir():
        raise QueryError(f"{logs}: no such folder")
    files = [p for p in logs.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))]
    return [describe_file(path) for path in sorted(files)]


def in_window(file: LogFile, start: dt.datetime | None, end: dt.datetime | None) -> bool:
    """Whether a file can hold events in [start, end): the same day range as the SQL's partition filter.

    The key date is the delivery date, never before the event, so the range runs from the start's date to the day
    after the range's last second (an event at 23:58 is often delivered the next day).
    """
    if file.day is None:
        return True
    if start is not None and file.day < start.date():
        return False
    return not (end is not None and file.day > (end - LAST_SECOND + SLACK).date())


# Read for every record whatever the queries name: the partition fallbacks (a file whose key says nothing) need these.
ALWAYS_READ = frozenset({"eventtime", "recipientaccountid", "awsregion"})


def used_columns(specs: Iterable[QuerySpec]) -> frozenset[str]:
    """The table columns the queries name (a word match on their SQL: a false match only reads one column more)."""
    words: set[str] = set()
    for spec in specs:
        words.update(re.findall(r"[a-z_][a-z0-9_]*", spec.sql.lower()))
    return frozenset(column.name for column in COLUMNS if column.name in words) | ALWAYS_READ


_PATH = re.compile(r"[a-z_][a-z0-9_]*(?:\s*\.\s*[a-z_][a-z0-9_]*)*")


def used_fields(specs: Iterable[QuerySpec]) -> dict[str, frozenset[tuple[str, ...]]]:
    """For each struct column the queries name, the field paths below it they name (``useridentity.arn`` gives
    ``("arn",)``); an empty path means the whole struct (named without a field after it: ``useridentity IS NULL``,
    ``useridentity['arn']`` or ``SELECT useridentity``), so nothing below it is left unread."""
    structs = {column.name for column in COLUMNS if column.kind == "struct"}
    paths: dict[str, set[tuple[str, ...]]] = {}
    for spec in specs:
        for chain in _PATH.findall(spec.sql.lower()):
            parts = [part.strip() for part in chain.split(".")]
            for k, part in enumerate(parts):  # after any alias: ``e.useridentity.arn``
                if part in structs:
                    paths.setdefault(part, set()).add(tuple(parts[k + 1 :]))
                    break
    return {name: frozenset(found) for name, found in paths.items()}


def read_shape(column: Column, paths: Collection[tuple[str, ...]] | None) -> Column:
    """``column`` with only the struct fields ``paths`` name (all of them when a path ends at the struct, or when
    none names a field it has): what ``read_json`` parses and the table keeps; the view shows the others as NULLs."""
    if column.kind != "struct" or paths is None or () in paths:
        return column
    below: dict[str, set[tuple[str, ...]]] = {}
    for path in paths:
        below.setdefault(path[0], set()).add(path[1:])
    kept = tuple(read_shape(f, below[f.name]) for f in column.fields if f.name in below)
    return dataclasses.replace(column, fields=kept) if kept else column


def _widened(column: Column, read: Column, source: str) -> str:
    """SQL giving the view's (full) value of ``column`` from its stored ``read`` shape at ``source``: the fields left
    unread are typed NULLs, so every query sees the Glue table's types."""
    if read is column:
        return source
    parsed = {f.name: f for f in read.fields}
    inner = ", ".join(
        f"{f.name} := "
        + (
            _widened(f, parsed[f.name], f"{source}.{_quoted(f.name)}")
            if f.name in parsed
            else f"CAST(NULL AS {f.view_type()})"
        )
        for f in column.fields
    )
    return f"CASE WHEN {source} IS NULL THEN NULL ELSE struct_pack({inner}) END"


def _json_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


class LocalLake:
    """An in-process DuckDB database holding the in-range CloudTrail records as ``cloudtrail_logs``.

    ``columns`` are the column names to read (all by default) and ``fields`` the struct fields to read of them (see
    :func:`used_fields`; all by default); the view still has every column and field of the Glue table.
    """

    def __init__(
        self,
        columns: Collection[str] | None = None,
        threads: int = 1,
        fields: dict[str, frozenset[tuple[str, ...]]] | None = None,
    ) -> None:
        import duckdb

        self._duckdb = duckdb
        self.columns = tuple(c for c in COLUMNS if columns is None or c.name in columns or c.name in ALWAYS_READ)
        self._read = {c.name: read_shape(c, None if fields is None else fields.get(c.name)) for c in self.columns}
        self.con = duckdb.connect(":memory:")
        # A compressed in-memory database: DuckDB's columnar compression on the loaded records, as on disk.
        self.con.execute("ATTACH ':memory:' AS lake (COMPRESS)")
        self.con.execute("USE lake")
        self.con.execute("SET TimeZone = 'UTC'")
        self.con.execute("SET enable_progress_bar = false")  # it would draw on stdout, in the middle of --json output
        # One thread: the load is many small gzip files and the queries are small, so a second thread mostly waits
        # and synchronises; measured (bench/audit_engine.py, CPU of the whole process) it costs about a fifth more
        # CPU and more peak memory (per-thread buffers) for a shorter wall time on an idle machine.
        self.con.execute(f"SET threads = {threads}")
        # Compress each row group once, when it is full (load() checkpoints then and at the end), instead of at every
        # 16 MiB appended: a checkpoint compresses the growing row group again each time, and the one that completed
        # it held the row group both ways at once (the peak memory of a run; bench/README.md section 4).
        self.con.execute("SET checkpoint_threshold = '1TB'")
        self._rows = self._compressed = 0
        # a struct keeps only the fields read (the view puts the others back as NULLs): less to hold and compress
        stored = ", ".join(f"{column.name} {self._read[column.name].view_type()}" for column in self.columns)
        partitions = ", ".join(f"{name} VARCHAR" for name in PARTITION_KEYS)
        # MISSING names a file without a Records array on one placeholder row, found and deleted after each batch
        # (the view does not show it): the one scan that loads a batch also finds them, no second parse.
        self.con.execute(f"CREATE TABLE {RECORDS} ({stored}, {partitions}, {MISSING} VARCHAR)")
        read = {column.name for column in self.columns}
        shaped = ", ".join(
            f"{_widened(column, self._read[column.name], column.name)} AS {column.name}"
            if column.name in read
            else f"CAST(NULL AS {column.view_type()}) AS {column.name}"
            for column in COLUMNS
        )
        self.con.execute(
            f"CREATE VIEW {TABLE_NAME} AS SELECT {shaped}, {', '.join(PARTITION_KEYS)} FROM {RECORDS}"  # noqa: S608 - table and column names are our constants
        )
        self.con.execute("CREATE TEMP TABLE files (filename VARCHAR, account VARCHAR, region VARCHAR, day VARCHAR)")
        # DuckDB's reader parses each record straight into these types (camelCase keys, as CloudTrail writes them).
        self._records_type = (
            "STRUCT(" + ", ".join(f"{_quoted(c.key)} {self._read[c.name].read_type()}" for c in self.columns) + ")[]"
        )
        self.opened: set[str] = set()
        self.skipped: list[tuple[str, str]] = []
        self.result_columns: dict[str, list[str]] = {}

    def load(self, files: list[LogFile]) -> None:
        """Load files in batches; on an error, bisect the batch to name and skip the bad files, keep the good ones."""
        if not files:
            return
        # Through a CSV file: binding a Python list costs about half a millisecond per element in DuckDB.
        with tempfile.TemporaryDirectory(prefix="governor-audit-") as scratch:
            listing = Path(scratch) / "files.csv"
            with listing.open("w", newline="", encoding="utf-8") as handle:
                writer = csv.writer(handle)
                writer.writerow(["filename", "account", "region", "day"])
                for f in files:
                    writer.writerow([str(f.path), f.account, f.region, f.day.strftime("%Y/%m/%d") if f.day else None])
            self.con.execute(
                "INSERT INTO files SELECT * FROM read_csv($listing, header = true, all_varchar = true, "
                "columns = {'filename': 'VARCHAR', 'account': 'VARCHAR', 'region': 'VARCHAR', 'day': 'VARCHAR'})",
                {"listing": str(listing)},
            )
        names = [str(f.path) for f in files]
        for offset in range(0, len(names), BATCH_FILES):
            self._load(names[offset : offset + BATCH_FILES])
            if self._rows // ROW_GROUP_ROWS > self._compressed // ROW_GROUP_ROWS:
                self._checkpoint()
        self._checkpoint()

    def _checkpoint(self) -> None:
        if self._rows > self._compressed:
            self.con.execute("CHECKPOINT lake")
            self._compressed = self._rows

    def _load(self, names: list[str]) -> None:
        self.opened.update(names)
        try:
            self._insert(names)  # reading fails before anything is inserted; the INSERT itself is atomic
        except self._duckdb.Error as error:
            if len(names) == 1:
                self.skipped.append((names[0], _reason(error)))
                return
            middle = len(names) // 2
            self._load(names[:middle])
            self._load(names[middle:])

    def _insert(self, names: list[str]) -> None:
        # One statement: read_json over the file list with the schema given, unnest the records, rename the struct
        # fields to the Hive names and add the partitions. Nothing is staged, and reading fails before anything is
        # inserted (the INSERT is atomic). A file without a Records array reads as NULL: it leaves one placeholder row
        # naming it (MISSING), which is reported and deleted, so every file is parsed once.
        records = self.con.read_json(
            names,  # type: ignore[arg-type]  # the relation API takes the file list natively; the stubs say one path
            columns={"Records": self._records_type},
            format="auto",
            filename=True,
            maximum_object_size=MAX_FILE_BYTES,
        )
        self.con.register("batch_files", records)
        try:
            values = ", ".join(
                self._read[column.name].view_expression(f"rec.{_quoted(column.key)}") for column in self.columns
            )
            inserted = self.con.execute(
                f"INSERT INTO {RECORDS} SELECT {values}, "  # noqa: S608 - table and column names are our constants
                "coalesce(f.account, rec.recipientAccountId), coalesce(f.region, rec.awsRegion), "
                "coalesce(f.day, strftime(try_cast(rec.eventTime AS TIMESTAMPTZ), '%Y/%m/%d')), "
                "CASE WHEN s.missing THEN filename END "
                "FROM (SELECT filename, Records IS NULL AS missing, unnest(coalesce(Records, [NULL])) AS rec "
                "FROM batch_files) AS s JOIN files AS f USING (filename)"
            ).fetchone()
            self._rows += int(inserted[0]) if inserted else 0
        finally:
            self.con.unregister("batch_files")
        empty = self.con.execute(
            f"SELECT {MISSING} FROM {RECORDS} WHERE {MISSING} IS NOT NULL ORDER BY 1"  # noqa: S608 - our constants
        ).fetchall()
        if empty:
            self.con.execute(f"DELETE FROM {RECORDS} WHERE {MISSING} IS NOT NULL")  # noqa: S608 - our constants
        self.skipped.extend((name, "not a CloudTrail log file: no Records array") for (name,) in empty)

    def record_count(self) -> int:
        row = self.con.execute(f"SELECT count(*) FROM {TABLE_NAME}").fetchone()  # noqa: S608 - table and column names are our constants
        return int(row[0]) if row else 0

    def time_span(self) -> tuple[dt.datetime, dt.datetime] | None:
        """Earliest and latest event time loaded (``None`` when nothing was loaded); a time outside the range every
        period must fit (``EARLIEST`` .. ``LATEST``, year 0001 or 9999 in a hostile file) is in no period, so it
        does not stretch the span either."""
        row = self.con.execute(
            f"SELECT strftime(min(t), '%Y-%m-%dT%H:%M:%SZ'), strftime(max(t), '%Y-%m-%dT%H:%M:%SZ') "  # noqa: S608 - table and column names are our constants
            f"FROM (SELECT try_cast(eventtime AS TIMESTAMPTZ) AS t FROM {TABLE_NAME}) WHERE t >= ? AND t < ?",
            [EARLIEST, LATEST],
        ).fetchone()
        if not row or row[0] is None:
            return None
        return parse_time(row[0]), parse_time(row[1])

    def run(self, spec: QuerySpec, parameters: dict[str, str]) -> dict[str, Any]:
        """Run one library query: ``{"count": rows, "rows": [{column: value}]}`` with JSON-ready values."""
        sql = translate(spec.sql)
        bound = {name: parameters[name] for name in spec.parameters}
        try:
            described = self.con.execute(f"DESCRIBE {sql}", bound).fetchall()
            temporal = [str(row[0]) for row in described if "TIME ZONE" in str(row[1]).upper()]
            if temporal:
                replaced = ", ".join(
                    f"strftime({_quoted(name)}, '%Y-%m-%dT%H:%M:%SZ') AS {_quoted(name)}" for name in temporal
                )
                sql = f"SELECT * REPLACE ({replaced}) FROM ({sql})"  # noqa: S608 - table and column names are our constants
            cursor = self.con.execute(sql, bound)
            names = [str(d[0]) for d in cursor.description or []]
            rows = [dict(zip(names, (_json_value(v) for v in values), strict=True)) for values in cursor.fetchall()]
        except self._duckdb.Error as error:
            raise QueryError(f"{spec.path}: DuckDB could not run the translated query: {_reason(error)}") from None
        self.result_columns[spec.name] = names
        return {"count": len(rows), "rows": rows}

    def close(self) -> None:
        self.con.close()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _reason(error: Exception) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else error.__class__.__name__
    return first[:300]


TRANSLATIONS = Path(__file__).with_name("translated.json")


def translate(sql: str) -> str:
    """Athena (Trino) SQL to DuckDB SQL; ``:name`` placeholders become DuckDB's ``$name``.

    The library's queries are translated once, ahead of time, into ``translated.json`` (keyed by the SQL's digest,
    regenerated with ``python -m governor_cli.audit_translations --write-translations``; a test checks it is
    current), so a run does not load sqlglot (about 20 MiB and a third of a second); any other SQL is translated here.
    """
    found = _translations().get(_digest(sql))
    return found if found is not None else transpile(sql)


def transpile(sql: str) -> str:
    """sqlglot's translation of one statement (what :func:`translate` caches)."""
    import sqlglot

    statements = [s for s in sqlglot.transpile(sql, read="athena", write="duckdb") if s.strip()]
    if len(statements) != 1:
        raise QueryError(f"expected one SQL statement, found {len(statements)}")
    return statements[0]


def _digest(sql: str) -> str:
    return hashlib.sha256(sql.encode("utf-8")).hexdigest()


@functools.cache
def _translations() -> dict[str, str]:
    try:
        entries = json.loads(TRANSLATIONS.read_text(encoding="utf-8"))["queries"]
        return {str(key): str(entry["duckdb"]) for key, entry in entries.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def translations(queries_dir: Path | None = None) -> dict[str, Any]:
    """The content of ``translated.json`` for the library's queries, translated now."""
    import sqlglot

    specs = sorted(list_queries(queries_dir), key=lambda spec: spec.name)
    return {
        "note": "generated by `python -m governor_cli.audit_translations --write-translations`; do not edit",
        "sqlglot": sqlglot.__version__,
        "queries": {_digest(spec.sql): {"name": spec.name, "duckdb": transpile(spec.sql)} for spec in specs},
    }


def run_audit(
    logs: Path,
    names: list[str] | None = None,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    *,
    queries_dir: Path | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> AuditRun:
    """Run the named library queries (all by default) over the CloudTrail files under ``logs``.

    Without ``start``/``end`` the range is the loaded events' own span, so open GPU sessions end at the last event.
    ``progress(step, total)`` is told each step as it ends (loading the files, then each query by name), for a
    caller's progress bar; the runtime draws nothing itself.
    """
    specs = select_queries(list_queries(queries_dir), names)
    start = parse_time(start) if start is not None else None
    end = parse_time(end) if end is not None else None
    if start is not None and end is not None and end <= start:
        raise QueryError(f"the range is empty: end {iso(end)} is not after start {iso(start)}")
    files = discover(Path(logs))
    wanted = [f for f in files if in_window(f, start, end)]
    lake = LocalLake(used_columns(specs), fields=used_fields(specs))
    total = len(specs) + 1
    try:
        lake.load(wanted)
        if progress is not None:
            progress(f"loaded {len(wanted)} files", total)
        span = lake.time_span()
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        # the default range is the events' own span, held within the supported time range (governor.domain.times)
        # so that a record dated 9999-12-31 cannot overflow the arithmetic; such records fall outside the range
        first = start or (max(span[0], EARLIEST) if span else now)
        last = end or ((min(span[1], LATEST - dt.timedelta(seconds=1)) if span else now) + dt.timedelta(seconds=1))
        parameters = {"start": iso(first), "end": iso(last)}
        results: dict[str, dict[str, Any]] = {}
        seconds: dict[str, float] = {}
        for spec in specs:
            began = time.perf_counter()
            results[spec.name] = lake.run(spec, parameters)
            seconds[spec.name] = time.perf_counter() - began
            if progress is not None:
                progress(spec.name, total)
        return AuditRun(
            results=results,
            skipped=sorted(lake.skipped),
            files_opened=len(lake.opened),
            files_pruned=len(files) - len(wanted),
            records=lake.record_count(),
            start=parameters["start"],
            end=parameters["end"],
            seconds=seconds,
            columns=dict(lake.result_columns),
        )
    finally:
        lake.close()


def table_columns(lake: LocalLake) -> Iterable[tuple[str, str]]:
    """(name, DuckDB type) of the local ``cloudtrail_logs`` table, for comparing with the Glue table."""
    return [(str(r[0]), str(r[1])) for r in lake.con.execute(f"DESCRIBE {TABLE_NAME}").fetchall()]


def event_span(logs: Path) -> tuple[dt.datetime, dt.datetime] | None:
    """The earliest and latest event time in the CloudTrail files under ``logs`` (None when there are none).

    ``governor report`` uses it to end a daily or weekly period after the last event, and to compare with the
    previous period only when the logs reach back into it.
    """
    lake = LocalLake()
    try:
        lake.load(discover(Path(logs)))
        return lake.time_span()
    finally:
        lake.close()
