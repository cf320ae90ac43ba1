"""The backtest's columnar, streaming replay: a metrics file read once into time partitions, NumPy computes each
sweep's windows for the fleet.

A CSV is read in one pass by Arrow's CSV parser into partition files on disk (:mod:`governor_cli.sim.spill`; every
distinct timestamp, id and metric name judged by the row-by-row reader's own code, values cast as ``float()`` reads
them). A file that reader does not vouch for (quoted fields, values Arrow's cast refuses, ...) is read by DuckDB in
two passes instead: the first collects the distinct timestamps and instance ids (each parsed and checked by the same
Python code as the row-by-row reader) and flags any row that reader might judge differently; the second writes the
samples, as (instance, metric, minute, value), into Parquet files partitioned by time. The replay then walks the
sweeps in time order holding only the minutes a window can reach (the lookback plus one partition) as one dense
instance-by-minute array per metric, so memory grows with the fleet and the window, not the history.

Each sweep computes every instance's window statistics at once (count, maximum, minimum, newest sample, when its
quiet stretch began) and applies the idle rule's own checks (:func:`governor.idle.checks.idle_checks`) to them. An
instance that is not idle in either window, carries no mark and no policy exemption cannot be warned or acted on this
sweep, so it is only counted (:class:`governor.idle.sweep.Settled`); every other instance goes through
:func:`governor.idle.sweep.sweep` itself, with its samples of the lookback, as in the row-by-row replay. Any row the
fast readers are unsure of sends the whole file to the row-by-row reader, which names the line and what is wrong.
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import math
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from governor.domain.breaker import Breaker
from governor.domain.fleet import Instance, exemption
from governor.idle.assessment import power_limit
from governor.idle.checks import checks_status, idle_checks, stall_check
from governor.idle.domain import (
    GPU_ENGINE_ACTIVE,
    GPU_MEMORY_USED,
    GPU_UTILIZATION,
    MEMORY_UNITS,
    NETWORK_BYTES,
    SAMPLE_SECONDS,
    Mark,
    Series,
    warning_window_minutes,
)
from governor.idle.onset import breaker_quiet_minutes, onset_limits
from governor.idle.sweep import Settled, SweepPlan, action_limit, sweep
from governor.policy import Policy
from governor_cli.sim.loaded import LOADED, Unsure
from governor_cli.sim.metrics_file import HEADER, KNOWN_METRICS, parse_timestamp
from governor_cli.sim.replay import Replay, ReplayedInstance

# Values the row-by-row reader's float() reads the same way as DuckDB's cast; anything else goes to that reader.
_PLAIN_NUMBER = r"\s*\+?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*"
LARGE_FILE = 1 << 30  # bytes of CSV from which the DuckDB pass uses every core
# Minutes per Parquet partition; the replay holds one partition plus the lookback per metric as a dense array.
PART_MINUTES = 240


if TYPE_CHECKING:
    from typing import TypeAlias

    from governor_cli.sim.parquet import ParquetSamples
    from governor_cli.sim.spill import Spilled

    #: Where the replay reads samples: a CSV's partition files (Arrow's or DuckDB's), a generator store, or Parquet.
    Source: TypeAlias = "Spilled | Samples | Store | ParquetSamples"


@dataclass
class Samples:
    """A metrics file as Parquet partitions of :data:`PART_MINUTES` (by epoch minute), with its ids and minutes."""

    folder: Path
    ids: list[str]
    minutes: Any  # sorted distinct epoch minutes (epoch seconds / 60) holding a sample, np.ndarray[int64]
    parts: set[int] = field(default_factory=set)
    part_minutes: int = PART_MINUTES
    base: int = 0  # minute indices are epoch minutes
    metrics: tuple[str, ...] = LOADED  # rows of the replay's arrays: metric codes are their indexes here
    _con: Any = field(default=None, repr=False, compare=False)

    def partition(self, part: int) -> Path:
        return self.folder / f"part={part}"

    def files(self) -> str:
        return str(self.folder / "*" / "*.parquet")

    def membership(self, spans: list[tuple[int, int]]) -> tuple[Any, Any, Any, Any]:
        """Per (instance, stretch) holding samples: the instance's index, the stretch, its first minute there, and
        whether it reports GPU utilisation there (four arrays)."""
        import numpy as np

        scratch = self.folder.parent
        con = _connect(scratch)
        try:
            _table(
                con,
                scratch / "spans.csv",
                "spans",
                {"lo": "BIGINT", "hi": "BIGINT", "sid": "INTEGER"},
                ((a, b, n) for n, (a, b) in enumerate(spans)),
            )
            rows = con.execute(
                "SELECT iid, sid, min(em), bool_or(m = 0) FROM read_parquet(?, hive_partitioning = false) AS p "
                "JOIN spans ON p.em BETWEEN spans.lo AND spans.hi WHERE m IS NOT NULL GROUP BY ALL",
                [self.files()],
            ).fetchall()
        finally:
            con.close()
        position = {instance_id: n for n, instance_id in enumerate(self.ids)}
        return (
            np.array([position[row[0]] for row in rows], dtype=np.int64),
            np.array([row[1] for row in rows], dtype=np.int64),
            np.array([row[2] for row in rows], dtype=np.int64),
            np.array([bool(row[3]) for row in rows], dtype=bool),
        )

    def fill(self, data: Any, lo: int, part: int, start: int, stop: int) -> None:
        """Write minutes ``start`` .. ``stop`` - 1 of partition ``part`` into ``data`` (whose minute 0 is ``lo``)."""
        import numpy as np

        con = self._lookup()
        got = con.execute(
            "SELECT ids.ix AS inst, m, em AS mi, v FROM read_parquet(?, hive_partitioning = false) AS p "
            "JOIN ids ON p.iid = ids.iid WHERE m IS NOT NULL AND em >= ? AND em < ?",
            [str(self.partition(part) / "*.parquet"), start, stop],
        ).fetchnumpy()
        width = data.shape[2]
        flat = (got["m"].astype(np.int64) * len(self.ids) + got["inst"]) * width + (got["mi"] - lo)
        np.fmax.at(data.reshape(-1), flat, got["v"])  # two samples in one minute: the larger, as the reader keeps

    def _lookup(self) -> Any:
        if self._con is None:
            scratch = self.folder.parent
            self._con = _connect(scratch)
            _table(
                self._con,
                scratch / "ids.csv",
                "ids",
                {"iid": "VARCHAR", "ix": "INTEGER"},
                ((i, n) for n, i in enumerate(self.ids)),
            )
        return self._con


def load(path: Path, memory_unit: str, folder: Path) -> Spilled | Samples:
    """Read ``path``: in one pass by Arrow into partition files under ``folder`` (:func:`spill.read_csv`), else by
    DuckDB into Parquet partitions (quoted fields, ...); :class:`Unsure` when a row needs the careful reader."""
    from governor_cli.sim.spill import read_csv

    try:
        return read_csv(path, memory_unit, folder / "spill", LOADED)
    except Unsure:
        shutil.rmtree(folder / "spill", ignore_errors=True)
    return load_partitions(path, memory_unit, folder)


def load_partitions(path: Path, memory_unit: str, folder: Path) -> Samples:
    """Read ``path`` into Parquet partitions under ``folder``; :class:`Unsure` when a row needs the careful reader."""
    import duckdb
    import numpy as np

    with path.open(encoding="utf-8-sig", newline="") as handle:
        try:
            header = next(csv.reader([handle.readline()]), [])
        except csv.Error:
            raise Unsure("header") from None
    if [h.strip().lower() for h in header] != HEADER:
        raise Unsure("header")
    out = folder / "samples"
    codes = " ".join(f"WHEN '{m}' THEN {n}" for n, m in enumerate(LOADED))
    memory = LOADED.index(GPU_MEMORY_USED)
    # A file of a few hundred MB is read in seconds by one thread; larger ones are worth the second core's buffers.
    con = _connect(folder, threads=1 if path.stat().st_size < LARGE_FILE else os.cpu_count() or 1)
    try:
        # One pass over the file: each row's instance id and timestamp as written, metric code (NULL: a metric the
        # reader skips, whose name is then kept), value, epoch minute as DuckDB reads the timestamp, and whether the
        # value is anything but a plain non-negative number. Partitioned by time.
        con.execute(
            f"""
            COPY (
                SELECT *, em // {PART_MINUTES} AS part FROM (
                    SELECT timestamp AS ts, instance_id AS iid, m,
                           CASE WHEN m IS NULL THEN metric END AS other,
                           CASE WHEN m = {memory} THEN TRY_CAST(value AS DOUBLE) * ? ELSE TRY_CAST(value AS DOUBLE)
                           END AS v,
                           m IS NOT NULL AND (timestamp IS NULL OR instance_id IS NULL OR value IS NULL
                               OR NOT regexp_full_match(value, '{_PLAIN_NUMBER}')
                               OR NOT coalesce(isfinite(TRY_CAST(value AS DOUBLE)), false)) AS bad,
                           floor(coalesce(epoch(TRY_CAST(timestamp AS TIMESTAMPTZ)), TRY_CAST(timestamp AS DOUBLE))
                                 / 60)::BIGINT AS em
                    FROM (SELECT *, (CASE metric {codes} END)::UTINYINT AS m
                          FROM read_csv(?, header = true, auto_detect = false, delim = ',', quote = '"', escape = '"',
                                        strict_mode = true, null_padding = false,
                                        columns = {{'timestamp': 'VARCHAR', 'instance_id': 'VARCHAR',
                                                   'metric': 'VARCHAR', 'value': 'VARCHAR'}}))
                )
            ) TO '{_quoted(out)}' (FORMAT parquet, PARTITION_BY (part), OVERWRITE_OR_IGNORE true, ROW_GROUP_SIZE 16384)
            """,  # noqa: S608 - our constants and our own temporary folder; the user's file is a parameter
            [MEMORY_UNITS[memory_unit], str(path)],
        )
        # The distinct timestamps (checked by the reader's own parser), ids and skipped metric names; bad values.
        groups = con.execute(
            f"""
            SELECT grouping(ts) = 0 AS by_ts, grouping(iid) = 0 AS by_id, ts, em, iid, other, count(*) FILTER (bad)
            FROM (SELECT CASE WHEN m IS NOT NULL THEN ts END AS ts, CASE WHEN m IS NOT NULL THEN em END AS em,
                         CASE WHEN m IS NOT NULL THEN iid END AS iid, other, bad
                  FROM read_parquet('{_quoted(out)}/*/*.parquet', hive_partitioning = false))
            GROUP BY GROUPING SETS ((ts, em), (iid), (other))
            """  # noqa: S608 - our constants and our own temporary folder
        ).fetchall()
    except duckdb.Error as error:
        raise Unsure(str(error)) from None
    finally:
        con.close()
    stamps: dict[str, float] = {}
    ids: list[str] = []
    minutes: list[int] = []
    for by_ts, by_id, ts, em, iid, other, bad in groups:
        if bad:
            raise Unsure("a value the fast reader does not vouch for")
        if by_id:
            if iid is None:
                continue
            if iid != iid.strip() or not iid or not iid.isprintable() or len(iid) > 256:
                raise Unsure("instance id")
            ids.append(iid)
        elif by_ts:
            if ts is None:
                continue
            try:
                when = parse_timestamp(ts, stamps)
            except ValueError:
                raise Unsure("timestamp") from None
            if em is None or em != (when - when % 60) // 60:
                raise Unsure("timestamp read differently")
            minutes.append(em)
        elif other is not None and other.strip() in KNOWN_METRICS:
            raise Unsure("metric name with spaces")  # the reader strips them; the fast one matches exactly
    if not ids:
        raise Unsure("no samples")
    return Samples(out, sorted(ids), np.unique(np.array(minutes, dtype=np.int64)), _parts(out))


def _parts(folder: Path) -> set[int]:
    """The partitions written (rows of skipped metrics with unreadable times land in ``part=NULL``; never read)."""
    return {int(p.name[5:]) for p in folder.glob("part=*") if p.name[5:].lstrip("-").isdigit()}


def _connect(folder: Path, threads: int = 1) -> Any:
    """One DuckDB thread unless asked: each writer thread keeps a buffer per open partition (about 100 MiB for two)."""
    import duckdb

    config: dict[str, str | bool | int | float | list[str]] = {
        "threads": threads,
        "memory_limit": "1GB",
        "preserve_insertion_order": False,
    }
    con = duckdb.connect(config=config)
    con.execute(f"SET temp_directory = '{_quoted(folder / 'spill')}'")
    con.execute("SET enable_progress_bar = false")  # it would draw on the user's terminal
    con.execute("SET TimeZone = 'UTC'")  # a timestamp without an offset is UTC, as the row-by-row reader takes it
    return con


def from_signals(signals: dict[str, dict[str, Series]], folder: Path) -> Samples:
    """The same partitions from series the row-by-row reader built (a file only it could read)."""
    import numpy as np

    ids = sorted(signals)
    rows = [
        (instance_id, code, int(t // 60), repr(v))
        for instance_id in ids
        for code, name in enumerate(LOADED)
        for t, v in zip(*_times_values(signals[instance_id].get(name)), strict=True)
    ]
    out = folder / "samples"
    con = _connect(folder)
    try:
        _table(con, folder / "rows.csv", "s", {"iid": "VARCHAR", "m": "UTINYINT", "em": "BIGINT", "v": "DOUBLE"}, rows)
        con.execute(
            f"COPY (SELECT iid, m, em, v, em // {PART_MINUTES} AS part FROM s) TO '{_quoted(out)}' "  # noqa: S608 - our constants and our own temporary folder; the user's file is a parameter
            "(FORMAT parquet, PARTITION_BY (part), OVERWRITE_OR_IGNORE true)"
        )
    finally:
        con.close()
    return Samples(out, ids, np.unique(np.array([r[2] for r in rows], dtype=np.int64)), _parts(out))


def _times_values(series: Series | None) -> tuple[Any, Any]:
    return (series.times, series.values) if series is not None else ((), ())


def _table(con: Any, path: Path, name: str, columns: dict[str, str], rows: Iterable[tuple[Any, ...]]) -> None:
    """A small lookup table through a file: DuckDB converts large Python lists one object at a time."""
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    spec = ", ".join(f"'{k}': '{v}'" for k, v in columns.items())
    con.execute(
        f"CREATE TEMP TABLE {name} AS SELECT * FROM read_csv(?, header = false, auto_detect = false, delim = ',', "  # noqa: S608 - our constants and our own temporary folder; the user's file is a parameter
        f"quote = '\"', escape = '\"', columns = {{{spec}}})",
        [str(path)],
    )


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")


def stretches(minutes: Any, gap_seconds: float) -> list[tuple[int, int]]:
    """Runs of sample minutes closer than ``gap_seconds`` (see :func:`governor_cli.commands.backtest.stretches`)."""
    import numpy as np

    breaks = np.nonzero(np.diff(minutes) * 60 > gap_seconds)[0]
    starts = [int(minutes[0]), *(int(minutes[b + 1]) for b in breaks)]
    ends = [*(int(minutes[b]) for b in breaks), int(minutes[-1])]
    return list(zip(starts, ends, strict=True))


class Window:
    """Dense ``[metric, instance, minute]`` samples (NaN where none) for the minutes ``lo`` .. ``hi`` - 1."""

    def __init__(self, samples: Source) -> None:
        import numpy as np

        self.samples = samples
        self.positions = {instance_id: n for n, instance_id in enumerate(samples.ids)}
        self.lo = 0
        self.hi = 0
        self.data = np.empty((len(samples.metrics), len(samples.ids), 0))
        self._chunks: dict[int, tuple[Any, Any, Any]] = {}  # chunk k: _stats of minutes k * STATS_CHUNK onwards

    def cover(self, lo: int, hi: int) -> None:
        """Hold at least minutes ``lo`` .. ``hi`` - 1 (time only moves forward): drop the minutes before ``lo``, keep
        what is held, and load the partitions after it."""
        import numpy as np

        if self.lo <= lo and hi <= self.hi:
            return
        size = self.samples.part_minutes
        overlap = lo < self.hi
        new_hi = -(-(max(hi, self.hi) if overlap else hi) // size) * size
        data = np.full((len(self.samples.metrics), len(self.samples.ids), new_hi - lo), np.nan)
        loaded_until = lo
        if overlap:
            keep = max(lo, self.lo)
            data[:, :, keep - lo : self.hi - lo] = self.data[:, :, keep - self.lo :]
            loaded_until = self.hi
        self.data = data  # the old block is released before the next partition is read
        fresh = [p for p in range(loaded_until // size, (new_hi - 1) // size + 1) if p in self.samples.parts]
        for part in fresh:
            start, stop = max(lo, loaded_until, part * size), min(new_hi, (part + 1) * size)
            if start < stop:
                self.samples.fill(data, lo, part, start, stop)
        self.lo, self.hi = lo, new_hi

    def view(self, lo: int, hi: int) -> Any:
        return self.data[:, :, lo - self.lo : hi - self.lo]

    def stats(self, lo: int, hi: int) -> tuple[Any, Any, Any]:
        """:func:`_stats` of ``view(lo, hi)``: whole chunks of :data:`STATS_CHUNK` minutes are reduced once and
        kept (consecutive sweeps' windows overlap in all but one interval), the partial ends each time. Counts add
        and maxima and minima merge exactly, so the result is the same as reducing the whole block."""
        first, last = -(-lo // STATS_CHUNK), hi // STATS_CHUNK
        if last <= first:
            return _stats(self.view(lo, hi))
        for k in [k for k in self._chunks if k < first - 2 * (last - first)]:
            del self._chunks[k]  # behind every window still to come
        parts = [_stats(self.view(lo, first * STATS_CHUNK))] if lo < first * STATS_CHUNK else []
        for k in range(first, last):
            if k not in self._chunks:
                self._chunks[k] = _stats(self.view(k * STATS_CHUNK, (k + 1) * STATS_CHUNK))
            parts.append(self._chunks[k])
        if last * STATS_CHUNK < hi:
            parts.append(_stats(self.view(last * STATS_CHUNK, hi)))
        merged = parts[0]
        for part in parts[1:]:
            merged = _merge(merged, part)
        return merged


STATS_CHUNK = 15  # minutes of window statistics reduced once and reused by the next sweeps


def _column(epoch: float, base: int) -> int:
    """The first minute index whose minute starts at or after ``epoch``."""
    return math.ceil((epoch - base) / 60)


def _stats(block: Any) -> tuple[Any, Any, Any]:
    """Per metric and instance: sample count, maximum and minimum (NaN without samples) over the block's minutes.

    A minute at a time across the whole fleet: NumPy reduces a short last axis (a chunk is 15 minutes) element by
    element, about four times slower than these whole-plane operations; the maximum and minimum of a set of numbers
    do not depend on the order they are taken in, so the result is the same."""
    import numpy as np

    width = block.shape[2]
    if width == 0:
        high = np.full(block.shape[:2], np.nan)
        return np.zeros(block.shape[:2], dtype=np.intp), high, high
    high = block[:, :, 0].copy()
    low = high.copy()
    count = (high == high).astype(np.intp)  # NaN != NaN: no sample
    for k in range(1, width):
        minute = block[:, :, k]
        np.fmax(high, minute, out=high)
        np.fmin(low, minute, out=low)
        count += minute == minute
    return count, high, low


def _merge(a: tuple[Any, Any, Any], b: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
    """The statistics of two adjacent blocks together."""
    import numpy as np

    return a[0] + b[0], np.fmax(a[1], b[1]), np.fmin(a[2], b[2])


def _by_signal(stats: tuple[Any, Any, Any], metrics: tuple[str, ...]) -> dict[str, tuple[Any, Any, Any]]:
    """The shape :func:`governor.idle.checks.idle_checks` reads; a signal the metrics file lacks has no samples."""
    import numpy as np

    count, high, low = stats
    found = {name: (count[n], high[n], low[n]) for n, name in enumerate(metrics)}
    none = np.full(count.shape[1], np.nan)
    for name in (*LOADED, NETWORK_BYTES):
        found.setdefault(name, (np.zeros(count.shape[1], dtype=np.int64), none, none))
    return found


def _last(mask: Any) -> tuple[Any, Any]:
    """Per row: whether any element is set, and the index of the last one."""
    import numpy as np

    if mask.shape[1] == 0:
        return np.zeros(mask.shape[0], dtype=bool), np.zeros(mask.shape[0], dtype=np.int64)
    return mask.any(axis=1), mask.shape[1] - 1 - np.argmax(mask[:, ::-1], axis=1)


@dataclass
class _Stretch:
    """One stretch's replay state: who is in it, launched when, stopped, marked; the breaker."""

    fleet: Any  # bool per instance: has a sample in the stretch
    gpu: Any  # bool per instance: has a GPU utilisation sample in the stretch (idle_onset reads it)
    stopped: Any
    marked: Any
    marks: dict[str, Mark] = field(default_factory=dict)
    breaker: Breaker = field(default_factory=Breaker)
    idle_since: Any = None  # epoch seconds of each mark's idle_since (NaN: none)
    due_at: Any = None  # when each mark's warning period ends (epoch seconds)
    queue_ok: Any = None  # the mark would be acted on as it is (no report, no checkpoint sent: see _plan)

    def __post_init__(self) -> None:
        import numpy as np

        n = len(self.fleet)
        self.idle_since = np.full(n, np.nan)
        self.due_at = np.full(n, np.inf)
        self.queue_ok = np.zeros(n, dtype=bool)


def replay_columnar(
    samples: Source,
    policy: Policy,
    interval: dt.timedelta,
    inventory: Mapping[str, Instance] | None = None,
) -> tuple[Replay, list[tuple[dt.datetime, dt.datetime]]]:
    """The replay of :func:`governor_cli.commands.backtest.replay_stretches`, sweep by sweep over the partitions.

    ``inventory`` is what EC2 says of the instances (type: the GPU's idle draw; tags: team and exemptions)."""
    import numpy as np

    idle = policy.idle
    enforcing = policy.model_copy(update={"idle": idle.model_copy(update={"enforce": True})})
    ids = samples.ids
    n = len(ids)
    base = samples.base
    step = interval.total_seconds()
    window_s = idle.window_minutes * 60
    early_minutes = warning_window_minutes(idle)
    quiet_s = breaker_quiet_minutes(idle, interval) * 60
    spans = stretches(samples.minutes, window_s + step)
    # Which instances each stretch holds, whether it reports GPU utilisation there, and each one's first sample.
    inst_col, sid_col, first_col, gpu_col = samples.membership(spans)
    launch_minute = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(launch_minute, inst_col.astype(np.int64), first_col.astype(np.int64))
    launch = base + launch_minute * 60.0
    launch_dt = [dt.datetime.fromtimestamp(t, dt.UTC) for t in launch]
    grace_until = launch + idle.launch_grace_minutes * 60
    start_dt = dt.datetime.fromtimestamp(base + spans[0][0] * 60, dt.UTC)
    known = inventory or {}
    # Exemptions by id, and by the inventory's tags as they stand at the start (an exempt instance is decided by
    # sweep() itself every time, which reads them at its own time).
    exempt = np.array(
        [
            exemption(i, dict(known[i].tags) if i in known else {}, policy.fleet, idle.exemptions, start_dt) is not None
            for i in ids
        ]
    )
    ceiling = np.array(
        [np.nan if (c := power_limit(known[i].type, idle).ceiling if i in known else None) is None else c for i in ids]
    )

    end_dt = dt.datetime.fromtimestamp(base + (spans[-1][1] + 1) * 60, dt.UTC)
    total = Replay(start=start_dt, end=end_dt, interval=interval)
    window = Window(samples)
    instances: dict[int, Instance] = {}

    def instance(ix: int) -> Instance:
        found = instances.get(ix)
        if found is None:
            given = known.get(ids[ix])
            found = instances[ix] = (
                replace(given, state="running", launch_time=launch_dt[ix])
                if given is not None
                else Instance(id=ids[ix], type="unknown", state="running", launch_time=launch_dt[ix])
            )
        return found

    from governor_cli import progress

    sweeps = sum(max(0, int(((hi + 1 - lo) * 60.0 - step) // step) + 1) for lo, hi in spans)
    shown = progress.bar(sweeps, f"backtest of {n} instances", "sweep")
    for sid, (lo, hi) in enumerate(spans):
        mine = sid_col == sid
        state = _Stretch(
            fleet=np.zeros(n, dtype=bool),
            gpu=np.zeros(n, dtype=bool),
            stopped=np.zeros(n, dtype=bool),
            marked=np.zeros(n, dtype=bool),
        )
        state.fleet[inst_col[mine]] = True
        state.gpu[inst_col[mine][gpu_col[mine]]] = True
        for ix in np.nonzero(state.fleet)[0]:
            total.instances.setdefault(ids[ix], ReplayedInstance())
        begin = base + lo * 60.0
        end = base + (hi + 1) * 60.0
        end_at = dt.datetime.fromtimestamp(end, dt.UTC)
        now = begin + step
        while now <= end:
            _one_sweep(
                now, window, state, samples, policy, enforcing, interval, total, instance, grace_until, exempt,
                early_minutes, quiet_s, end_at, ceiling,
            )  # fmt: skip
            shown.update(1)
            now += step
    shown.close()
    gaps = [
        (dt.datetime.fromtimestamp(base + (a[1] + 1) * 60, dt.UTC), dt.datetime.fromtimestamp(base + b[0] * 60, dt.UTC))
        for a, b in itertools.pairwise(spans)
    ]
    for record in total.instances.values():
        record.gpu_hours_reclaimed = round(record.gpu_hours_reclaimed, 4)
    return total, gaps


def _activity_ages(window: Window, metrics: tuple[str, ...], lo: int, hi: int, now: float, base: int) -> Any:
    """Minutes since each instance's newest utilisation and engine activity sample in the lookback (two rows; NaN
    without one): both windows of a sweep read them, each picks its row with :func:`_newest_age`."""
    import numpy as np

    ages = []
    for name in (GPU_UTILIZATION, GPU_ENGINE_ACTIVE):
        if name not in metrics:
            ages.append(np.full(len(window.samples.ids), np.nan))
            continue
        has, ix = _last(~np.isnan(window.view(lo, hi)[metrics.index(name)]))
        ages.append(np.where(has, (now - (base + (lo + ix) * 60.0)) / 60, np.nan))
    return ages


def _newest_age(ages: Any, stats: Mapping[str, tuple[Any, Any, Any]]) -> Any:
    """Minutes since each instance's newest activity sample: engine activity where the window holds any, else
    utilisation (as the sweep reads the series it judges); NaN without one."""
    import numpy as np

    return np.where(stats[GPU_ENGINE_ACTIVE][0] > 0, ages[1], ages[0])


def _one_sweep(
    now: float,
    window: Window,
    state: _Stretch,
    samples: Source,
    policy: Policy,
    enforcing: Policy,
    interval: dt.timedelta,
    total: Replay,
    instance: Any,
    grace_until: Any,
    exempt: Any,
    early_minutes: int,
    quiet_s: float,
    end_at: dt.datetime,
    ceiling: Any,
) -> None:
    import numpy as np

    idle = policy.idle
    base = samples.base
    metrics = samples.metrics
    step = interval.total_seconds()
    window_s = idle.window_minutes * 60
    since = now - window_s - step
    look_lo, look_hi = _column(since, base), _column(now + 1, base)
    window.cover(look_lo, look_hi)
    full_lo, end = _column(now - window_s, base), _column(now, base)
    if early_minutes < idle.window_minutes:
        early_lo = _column(now - early_minutes * 60, base)
        early = window.stats(early_lo, end)
        full = _merge(window.stats(full_lo, early_lo), early)
    else:
        full = window.stats(full_lo, end)
    full_stats = _by_signal(full, metrics)
    ages = _activity_ages(window, metrics, look_lo, look_hi, now, base)
    age = _newest_age(ages, full_stats)
    if early_minutes < idle.window_minutes:
        early_stats = _by_signal(early, metrics)
        busy_e, gap_e = checks_status(
            idle_checks(
                early_stats,
                _newest_age(ages, early_stats),
                idle,
                early_minutes,
                ceiling,
            )
        )
        early_idle = ~busy_e & ~gap_e
    else:
        early_idle = np.zeros(len(samples.ids), dtype=bool)
    busy, gap = checks_status(idle_checks(full_stats, age, idle, idle.window_minutes, ceiling))
    full_idle = ~busy & ~gap
    stalled = np.asarray(stall_check(full_stats, idle, idle.window_minutes, ceiling), dtype=bool) & ~gap
    running = state.fleet & ~state.stopped
    grace = now < grace_until
    careful = running & (state.marked | exempt | (~grace & (full_idle | early_idle | stalled)))
    quick = running & ~careful
    quick_busy = quick & ~grace & busy
    # When each quick, busy instance's quiet stretch began: idle_onset's rule, over the same lookback.
    onset = np.full(len(samples.ids), np.nan)
    block = window.view(look_lo, _column(now, base))
    for signal, limit in onset_limits(idle):
        if signal not in metrics:
            continue
        found, last = _last(block[metrics.index(signal)] >= limit)
        ends = np.where(found, base + (look_lo + last) * 60.0 + SAMPLE_SECONDS[signal], np.nan)
        onset = np.fmax(onset, ends)
    quiet = state.gpu & ~np.isnan(onset) & (now - onset >= quiet_s)
    # The rate limit's queue: marked, idle for the whole window and past their warning, so each would be acted on and
    # all but the first ``limit`` (longest idle first, then by id: every replayed instance has one type) deferred with
    # their marks kept. Only those first ones go through sweep(); the rest are counted as deferred, which is what
    # sweep() would decide for them, unless the breaker is open (it holds instead) or no shortcut is safe.
    due = careful & state.marked & ~grace & ~exempt & ~busy & ~gap & (now >= state.due_at) & state.queue_ok
    waiting = np.zeros(len(samples.ids), dtype=bool)
    if not state.breaker.open and due.any():
        limit = action_limit(int(running.sum()), idle)
        queue = np.nonzero(due)[0]
        order = queue[np.lexsort((queue, state.idle_since[queue]))]
        waiting[order[limit:]] = True
    plan, careful = _plan(
        window, state, samples, enforcing, interval, instance, now, look_lo, look_hi,
        careful, quick, quick_busy, due, waiting, quiet, onset,
    )  # fmt: skip
    at = dt.datetime.fromtimestamp(now, dt.UTC)
    state.breaker = plan.breaker
    total.sweeps += 1
    if plan.held_back:
        total.held_back_sweeps.append(at)
    if plan.alarm is not None:
        total.breaker_trips.append(at)
    deferred = int((waiting & ~careful).sum())
    if plan.deferred or deferred:
        total.deferred_sweeps += 1
    if deferred:
        total.verdicts["deferred"] = total.verdicts.get("deferred", 0) + deferred
    verdicts = total.verdicts
    for name, count in (
        ("grace", int((quick & grace).sum())),
        ("busy", int((quick & ~grace & busy).sum())),
        ("unmonitored", int((quick & ~grace & ~busy).sum())),
    ):
        if count:
            verdicts[name] = verdicts.get(name, 0) + count
    index = {samples.ids[ix]: ix for ix in np.nonzero(careful)[0]}
    for outcome in plan.outcomes:
        instance_id = outcome.instance.id
        verdicts[outcome.outcome] = verdicts.get(outcome.outcome, 0) + 1
        record = total.instances[instance_id]
        mark = outcome.mark
        if outcome.outcome == "warned":
            record.actions.append((at, "warn"))
        elif outcome.outcome == "checkpoint" and mark is not None:
            mark = _succeeded(mark)
        elif outcome.outcome == "acted":
            kind = next(a.type for a in outcome.decision.actions if a.type in ("stop", "terminate"))
            record.actions.append((at, kind))
            record.stopped_at = at
            state.stopped[index[instance_id]] = True
            hours = round((end_at - at).total_seconds() / 3600, 4)
            record.gpu_hours_reclaimed = round(record.gpu_hours_reclaimed + hours, 4)
        ix = index[instance_id]
        if mark is None:
            state.marks.pop(instance_id, None)
            state.marked[ix] = False
        else:
            state.marks[instance_id] = mark
            state.marked[ix] = True
            state.idle_since[ix] = mark.idle_since.timestamp()
            warned = mark.warned_at or mark.idle_since
            state.due_at[ix] = warned.timestamp() + idle.warning_minutes * 60
            state.queue_ok[ix] = mark.reported_at is None and mark.checkpoint_sent_at is None


def _plan(
    window: Window,
    state: _Stretch,
    samples: Source,
    enforcing: Policy,
    interval: dt.timedelta,
    instance: Any,
    now: float,
    look_lo: int,
    look_hi: int,
    careful: Any,
    quick: Any,
    quick_busy: Any,
    due: Any,
    waiting: Any,
    quiet: Any,
    onset: Any,
) -> tuple[SweepPlan, Any]:
    """sweep() over the careful instances but the ``waiting`` ones, which are counted as deferred (see _one_sweep).

    The shortcut is checked against sweep()'s own answer: if anything but exactly the instances let through would act,
    or the breaker trips, the sweep is decided again with every careful instance, as if there were no shortcut.
    Returns the plan and the instances it decided.
    """
    import numpy as np

    at = dt.datetime.fromtimestamp(now, dt.UTC)
    position = window.positions
    for attempt in (0, 1):
        aside = waiting if attempt == 0 else np.zeros_like(waiting)
        rows = careful & ~aside
        settled = Settled(
            count=int((quick | aside).sum()),
            monitored=int((quick_busy | aside).sum()),  # busy, and idle: both are monitored
            onsets={samples.ids[ix]: float(onset[ix]) for ix in np.nonzero((quick_busy | aside) & quiet)[0]},
            signals=lambda wanted: _series(
                window,
                np.array(sorted(position[i] for i in wanted), dtype=np.int64),
                look_lo,
                look_hi,
                samples.base,
                state.gpu,
                samples.ids,
            ),
        )
        picked = np.nonzero(rows)[0]
        signals = _series(window, picked, look_lo, look_hi, samples.base, state.gpu, samples.ids)
        fleet = [instance(ix) for ix in picked]
        plan = sweep(
            fleet, signals, state.marks, enforcing, at, interval=interval, breaker=state.breaker, settled=settled
        )
        if not aside.any():
            break
        acting = {o.instance.id for o in plan.outcomes if o.outcome in ("acted", "checkpoint", "deferred", "held")}
        expected = {samples.ids[ix] for ix in np.nonzero(due & ~waiting)[0]}
        if acting == expected and plan.alarm is None and not plan.breaker.open:
            break
    return plan, rows


def _succeeded(mark: Mark) -> Mark:
    from dataclasses import replace

    return replace(mark, checkpoint_status="Success")


def _series(
    window: Window, rows: Any, lo: int, hi: int, base: int, reports_gpu: Any, ids: list[str]
) -> dict[str, dict[str, Series]]:
    """The lookback's samples of the instances in ``rows``, as the sweep reads them (one list per metric and
    instance; the minutes list is shared by every row without a gap)."""
    import numpy as np

    found: dict[str, dict[str, Series]] = {ids[ix]: {} for ix in rows}
    if not len(rows):
        return found
    block = window.view(lo, hi)[:, rows, :]
    minutes = (base + np.arange(lo, hi) * 60.0).tolist()
    gaps = np.isnan(block)
    for n, name in enumerate(window.samples.metrics):
        values = block[n].tolist()
        complete = ~gaps[n].any(axis=1)
        for k, ix in enumerate(rows.tolist()):
            if complete[k]:
                found[ids[ix]][name] = Series(minutes, values[k])
                continue
            pairs = [(t, v) for t, v in zip(minutes, values[k], strict=True) if v == v]  # NaN != NaN: no sample
            if pairs:
                found[ids[ix]][name] = Series([t for t, _ in pairs], [v for _, v in pairs])
    for ix in rows.tolist():
        if GPU_UTILIZATION not in found[ids[ix]] and reports_gpu[ix]:
            # The instance reports GPU utilisation elsewhere in this stretch, which idle_onset checks; the
            # placeholder lies after every window the sweep reads.
            found[ids[ix]][GPU_UTILIZATION] = Series([base + hi * 60.0 + 86400.0], [0.0])
    return found


# --- The generator's samples as arrays: a workload streamed into the replay without a CSV -------------------------

STORED = LOADED[:3]  # a store holds utilisation, memory and CPU (the generator's default metrics)
STORE_CHUNK = 100  # instances per chunk of the store: one chunk of a month is 100 x 43,200 x 3 int32 (52 MiB)
_MISSING = -1


def encode(instance: Any) -> Any:
    """One generated instance as ``[metric, minute]`` int32 in the CSV's own precision (-1: no sample).

    ``write_rows`` writes utilisation with one decimal and memory as whole MB; these are the numbers a reader of that
    file gets (tenths for utilisation, MB for memory), so a store and the file replay the same values.
    """
    import numpy as np

    out = np.empty((len(STORED), instance.minutes), dtype=np.int32)
    for n, values in enumerate((instance.gpu_utilization, instance.gpu_memory_used, instance.cpu_utilization)):
        raw = np.array(values, dtype=np.float64)  # None -> NaN
        missing = np.isnan(raw)
        raw[missing] = 0.0
        if n == 1:
            codes = np.trunc(raw)  # str(int(value))
        else:
            tenths = raw * 10
            codes = np.rint(tenths)
            # Where rounding the product could differ from formatting the exact value with one decimal, format it.
            near = np.nonzero(np.abs(tenths - np.floor(tenths) - 0.5) < 1e-6)[0]
            for k in near.tolist():
                codes[k] = round(float(f"{raw[k]:.1f}") * 10)
        codes[missing] = _MISSING
        out[n] = codes
    return out


def write_chunk(folder: Path, chunk: int, instances: Iterable[Any], part_minutes: int = PART_MINUTES) -> int:
    """Write generated instances (one start and length) as a store chunk: one ``.npy`` per time partition, plus
    their ids, which report GPU utilisation and which minutes hold a sample. Returns the samples written."""
    import json

    import numpy as np

    rows: list[Any] = []
    ids: list[str] = []
    start = minutes = None
    for instance in instances:
        if start is None:
            start, minutes = instance.start, instance.minutes
        if (instance.start, instance.minutes) != (start, minutes):
            raise ValueError("a store chunk holds instances of one start and length")
        ids.append(instance.id)
        rows.append(encode(instance))
    target = folder / f"chunk{chunk:05d}"
    target.mkdir(parents=True, exist_ok=True)
    if not rows or start is None or minutes is None:
        (target / "meta.json").write_text(json.dumps({"ids": [], "first": 0, "minutes": 0}))
        return 0
    if start % 60:
        raise ValueError("a store starts on a whole minute")
    block = np.stack(rows, axis=1)  # [metric, instance, minute]
    first = start // 60
    for part in range(first // part_minutes, (first + minutes - 1) // part_minutes + 1):
        lo, hi = max(part * part_minutes, first), min((part + 1) * part_minutes, first + minutes)
        piece = np.full((len(STORED), len(ids), part_minutes), _MISSING, dtype=np.int32)
        piece[:, :, lo - part * part_minutes : hi - part * part_minutes] = block[:, :, lo - first : hi - first]
        np.save(target / f"part{part}.npy", piece)
    present = (block != _MISSING).any(axis=(0, 1))
    seen = (block != _MISSING).any(axis=0)  # [instance, minute]
    gpu = seen.any(axis=1) & (block[0] != _MISSING).any(axis=1)
    earliest = first + np.argmax(seen, axis=1)
    np.save(target / "present.npy", present)
    meta = {"ids": ids, "first": first, "minutes": minutes, "gpu": gpu.tolist(), "earliest": earliest.tolist()}
    (target / "meta.json").write_text(json.dumps(meta))
    return int((block != _MISSING).sum())


class Store:
    """Samples as the workload generator's chunks (see :func:`write_chunk`): dense per partition, no CSV to parse."""

    def __init__(self, folder: Path, memory_unit: str = "MB", part_minutes: int = PART_MINUTES) -> None:
        import json

        import numpy as np

        self.folder = folder
        self.part_minutes = part_minutes
        self.metrics = STORED
        self.base = 0
        self.memory_scale = MEMORY_UNITS[memory_unit]
        self.chunks: list[Path] = []
        self.ids: list[str] = []
        gpu: list[bool] = []
        earliest: list[int] = []
        present: Any = None
        first = None
        for chunk in sorted(folder.glob("chunk*")):
            meta = json.loads((chunk / "meta.json").read_text())
            if not meta["ids"]:
                continue
            if first is not None and (meta["first"], meta["minutes"]) != first:
                raise ValueError("every chunk of a store has one start and length")
            first = (meta["first"], meta["minutes"])
            self.chunks.append(chunk)
            self.ids.extend(meta["ids"])
            gpu.extend(meta["gpu"])
            earliest.extend(meta["earliest"])
            mine = np.load(chunk / "present.npy")
            present = mine if present is None else present | mine
        if first is None or present is None:
            raise ValueError(f"{folder}: no samples")
        if self.ids != sorted(self.ids) or len(set(self.ids)) != len(self.ids):
            raise ValueError("a store's instance ids are distinct and in order")
        self.first, self.span = first
        self.gpu = np.array(gpu, dtype=bool)
        self.earliest = np.array(earliest, dtype=np.int64)
        self.minutes = self.first + np.nonzero(present)[0].astype(np.int64)
        self.parts = set(range(self.first // part_minutes, (self.first + self.span - 1) // part_minutes + 1))

    def membership(self, spans: list[tuple[int, int]]) -> tuple[Any, Any, Any, Any]:
        """(instance, stretch, first minute, reports GPU) rows, as the Parquet path's query returns them."""
        import numpy as np

        if len(spans) != 1:
            raise ValueError("a generated workload is one stretch")
        n = len(self.ids)
        return np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64), self.earliest, self.gpu

    def fill(self, data: Any, lo: int, part: int, start: int, stop: int) -> None:
        """Write minutes ``start`` .. ``stop`` - 1 of partition ``part`` into ``data`` (whose minute 0 is ``lo``)."""
        import numpy as np

        codes = np.concatenate([np.load(chunk / f"part{part}.npy") for chunk in self.chunks], axis=1)
        offset = part * self.part_minutes
        piece = codes[:, :, start - offset : stop - offset].astype(np.float64)
        piece[codes[:, :, start - offset : stop - offset] == _MISSING] = np.nan
        piece[0] /= 10
        piece[1] *= self.memory_scale
        piece[2] /= 10
        data[:, :, start - lo : stop - lo] = piece
