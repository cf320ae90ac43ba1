"""Metrics files in Parquet: ``governor backtest --metrics FILE.parquet``, and what ``--from-cloudwatch --save`` writes.

The columns are the CSV's (``timestamp``, ``instance_id``, ``metric``, ``value``): ``timestamp`` a Parquet
timestamp (any unit) or epoch seconds, ``instance_id`` and ``metric`` strings (dictionary-encoded is best), ``value``
a number. A file whose row groups follow each other in time (each group's first minute at or after the previous
group's last; what the governor writes: one group per 4 hours of the whole fleet) is replayed straight from the
file, one row group at a time, so memory holds the fleet's window, not the month. Any other order is first sorted
by time into a scratch Parquet file by DuckDB (on disk, bounded memory), then replayed the same way.

pyarrow is a CLI dependency only (requirements.txt); the Lambda layer does not carry it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from governor.idle.domain import GPU_MEMORY_USED, GPU_UTILIZATION, MEMORY_UNITS
from governor_cli.sim.loaded import LOADED, Unsure
from governor_cli.sim.metrics_file import MetricsFileError

MAGIC = b"PAR1"
COLUMNS = ("timestamp", "instance_id", "metric", "value")
GROUP_MINUTES = 240  # what the writer puts in one row group: the replay's partition


def is_parquet(path: Path) -> bool:
    """A Parquet file starts (and ends) with ``PAR1``."""
    try:
        with path.open("rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


def schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("timestamp", pa.timestamp("s", tz="UTC")),
            ("instance_id", pa.dictionary(pa.int32(), pa.string())),
            ("metric", pa.dictionary(pa.int8(), pa.string())),
            ("value", pa.float64()),
        ]
    )


def write(path: Path, groups: Iterable[tuple[Any, Any, Any, Any]], *, compression: str = "zstd") -> int:
    """Write row groups in time order: each item is (epoch seconds int64, instance ids as dictionary indices int32
    with their dictionary, metric names as indices int8 with theirs, values float64), given as
    ``(seconds, (indices, names), (codes, metrics), values)``. Returns the rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 0
    with pq.ParquetWriter(
        str(path), schema(), compression=compression, use_dictionary=["instance_id", "metric"]
    ) as out:
        for seconds, (indices, names), (codes, metrics), values in groups:
            table = pa.table(
                {
                    "timestamp": pa.array(seconds, type=pa.int64()).cast(pa.timestamp("s", tz="UTC")),
                    "instance_id": pa.DictionaryArray.from_arrays(
                        pa.array(indices, type=pa.int32()), pa.array(names, type=pa.string())
                    ),
                    "metric": pa.DictionaryArray.from_arrays(
                        pa.array(codes, type=pa.int8()), pa.array(metrics, type=pa.string())
                    ),
                    "value": pa.array(values, type=pa.float64()),
                },
                schema=schema(),
            )
            out.write_table(table, row_group_size=max(len(table), 1))
            rows += len(table)
    return rows


@dataclass
class _Group:
    lo: int  # first epoch minute in the row group
    hi: int  # last epoch minute
    ids: Any = None  # global instance indexes present
    first: Any = None  # their first minute in the group
    util: Any = None  # whether they report GPU utilisation in it


@dataclass
class ParquetSamples:
    """A time-ordered Parquet metrics file as the columnar replay reads samples (see ``columnar.Samples``)."""

    path: Path
    memory_unit: str = "MB"
    ids: list[str] = field(default_factory=list)
    minutes: Any = None
    parts: set[int] = field(default_factory=set)
    part_minutes: int = 240
    base: int = 0
    metrics: tuple[str, ...] = ()
    rows_read: int = 0
    _groups: list[_Group] = field(default_factory=list)
    _file: Any = None
    _cache: tuple[int, Any] | None = None
    _positions: dict[str, int] = field(default_factory=dict)

    def open(self) -> ParquetSamples:
        """Check the schema and the time order, and read the ids, minutes and membership (one pass over the ids,
        timestamps and metric names; values are read by the replay, a row group at a time)."""
        import numpy as np
        import pyarrow.parquet as pq

        try:
            names = pq.ParquetFile(str(self.path)).schema_arrow.names
            if [n for n in COLUMNS if n not in names]:
                raise MetricsFileError(
                    f"{self.path}: Parquet columns must include {', '.join(COLUMNS)}; found {', '.join(names)}"
                )
            self._file = pq.ParquetFile(str(self.path), read_dictionary=["instance_id", "metric"])
        except MetricsFileError:
            raise
        except Exception as error:  # pyarrow raises several types for a broken file
            raise MetricsFileError(f"{self.path}: not a readable Parquet file ({error.__class__.__name__})") from None
        minutes: list[Any] = []
        seen = np.zeros(len(LOADED), dtype=bool)
        previous = -math.inf
        for number in range(self._file.num_row_groups):
            minute, inst, code = self._keys(number)
            if not len(minute):
                self._groups.append(_Group(0, -1, np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, bool)))
                continue
            lo, hi = int(minute.min()), int(minute.max())
            if lo < previous:
                raise Unsure("row groups not in time order")
            previous = hi
            known = code >= 0
            seen[np.unique(code[known])] = True
            order = np.unique(inst[known]) if known.any() else np.empty(0, np.int64)
            first = np.full(len(self._positions), np.iinfo(np.int64).max)
            np.minimum.at(first, inst[known], minute[known])
            util = np.zeros(len(self._positions), dtype=bool)
            util[inst[known & (code == LOADED.index(GPU_UTILIZATION))]] = True
            self._groups.append(_Group(lo, hi, order, first[order], util[order]))
            minutes.append(np.unique(minute[known]))
            for part in range(lo // self.part_minutes, hi // self.part_minutes + 1):
                self.parts.add(part)
        if not self._positions:
            raise MetricsFileError(f"{self.path}: no samples")
        present = np.nonzero(seen)[0]
        self.metrics = tuple(LOADED[c] for c in present.tolist())  # only the metrics the file holds, in code order
        self._row = np.full(len(LOADED), -1, dtype=np.int64)
        self._row[present] = np.arange(len(present))
        self.ids = sorted(self._positions)
        self._sorted = np.empty(len(self.ids), dtype=np.int64)
        self._sorted[[self._positions[i] for i in self.ids]] = np.arange(len(self.ids))
        self.minutes = np.unique(np.concatenate(minutes)) if minutes else np.empty(0, np.int64)
        if not len(self.minutes):
            raise MetricsFileError(f"{self.path}: no gpu_utilization, gpu_memory_used or cpu_utilization samples")
        return self

    def _keys(self, number: int) -> tuple[Any, Any, Any]:
        """One row group's epoch minutes, first-seen instance indexes and metric codes (-1: a metric not loaded)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        table = self._file.read_row_group(number, columns=["timestamp", "instance_id", "metric"])
        stamp = table.column("timestamp")
        if pa.types.is_timestamp(stamp.type):
            seconds = pc.cast(stamp, pa.timestamp("s", tz="UTC")).cast(pa.int64())
        elif pa.types.is_integer(stamp.type) or pa.types.is_floating(stamp.type):
            seconds = pc.floor(pc.cast(stamp, pa.float64())).cast(pa.int64())
        else:
            raise Unsure("timestamps that are neither Parquet timestamps nor epoch seconds")
        if seconds.null_count:
            raise MetricsFileError(f"{self.path}: row group {number}: empty timestamp")
        minute = np.floor_divide(seconds.to_numpy(), 60)
        inst = self._indexes(table.column("instance_id"), number)
        names = table.column("metric")
        code = np.full(len(minute), -1, dtype=np.int8)
        offset = 0
        for chunk in names.chunks:
            chunk = chunk if pa.types.is_dictionary(chunk.type) else pc.dictionary_encode(chunk)
            lookup = np.array([LOADED.index(n) if n in LOADED else -1 for n in chunk.dictionary.to_pylist()] + [-1])
            idx = chunk.indices.to_numpy(zero_copy_only=False)
            idx = np.where(chunk.is_null().to_numpy(zero_copy_only=False), len(lookup) - 1, idx)
            code[offset : offset + len(chunk)] = lookup[idx]
            offset += len(chunk)
        return minute, inst, code

    def _indexes(self, column: Any, number: int) -> Any:
        """First-seen global index of each row's instance id (new ids are added)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        out = np.empty(len(column), dtype=np.int64)
        offset = 0
        for chunk in column.chunks:
            chunk = chunk if pa.types.is_dictionary(chunk.type) else pc.dictionary_encode(chunk)
            if chunk.null_count:
                raise MetricsFileError(f"{self.path}: row group {number}: empty instance_id")
            lookup = np.empty(len(chunk.dictionary), dtype=np.int64)
            for k, name in enumerate(chunk.dictionary.to_pylist()):
                if not name or not name.isprintable() or len(name) > 256 or name != name.strip():
                    raise MetricsFileError(
                        f"{self.path}: row group {number}: instance_id {name[:40]!r} is not a printable id"
                    )
                lookup[k] = self._positions.setdefault(name, len(self._positions))
            out[offset : offset + len(chunk)] = lookup[chunk.indices.to_numpy(zero_copy_only=False)]
            offset += len(chunk)
        return out

    def membership(self, spans: list[tuple[int, int]]) -> tuple[Any, Any, Any, Any]:
        """(instance, stretch, first minute, reports GPU) per instance and stretch holding samples."""
        import numpy as np

        n = len(self.ids)
        out: list[tuple[Any, Any, Any, Any]] = []
        for sid, (lo, hi) in enumerate(spans):
            first = np.full(n, np.iinfo(np.int64).max)
            util = np.zeros(n, dtype=bool)
            for number, group in enumerate(self._groups):
                if group.hi < lo or group.lo > hi:
                    continue
                if lo <= group.lo and group.hi <= hi:
                    ids, firsts, utils = group.ids, group.first, group.util
                else:  # the group straddles a stretch's edge: its rows decide
                    minute, inst, code = self._keys(number)
                    keep = (code >= 0) & (minute >= lo) & (minute <= hi)
                    ids = np.unique(inst[keep])
                    mins = np.full(len(self._positions), np.iinfo(np.int64).max)
                    np.minimum.at(mins, inst[keep], minute[keep])
                    firsts = mins[ids]
                    flags = np.zeros(len(self._positions), dtype=bool)
                    flags[inst[keep & (code == LOADED.index(GPU_UTILIZATION))]] = True
                    utils = flags[ids]
                where = self._sorted[ids]
                np.minimum.at(first, where, firsts)
                util[where] |= utils
            rows = np.nonzero(first < np.iinfo(np.int64).max)[0]
            out.append((rows, np.full(len(rows), sid, dtype=np.int64), first[rows], util[rows]))
        return tuple(np.concatenate([o[k] for o in out]) for k in range(4))  # type: ignore[return-value]

    def fill(self, data: Any, lo: int, part: int, start: int, stop: int) -> None:
        """Write minutes ``start`` .. ``stop`` - 1 into ``data`` (whose minute 0 is ``lo``), from the row groups that
        hold them; two samples in one minute keep the larger, as the row-by-row reader does."""
        import numpy as np

        n, width = len(self.ids), data.shape[2]
        scale = MEMORY_UNITS[self.memory_unit]
        flat = data.reshape(-1)
        for number, group in enumerate(self._groups):
            if group.hi < start or group.lo >= stop:
                continue
            minute, inst, code, value = self._group(number)
            keep = (code >= 0) & (minute >= start) & (minute < stop)
            if not keep.all():
                minute, inst, code, value = minute[keep], inst[keep], code[keep], value[keep]
            value = np.where(code == LOADED.index(GPU_MEMORY_USED), value * scale, value)
            np.fmax.at(flat, (self._row[code] * n + self._sorted[inst]) * width + (minute - lo), value)

    def _group(self, number: int) -> tuple[Any, Any, Any, Any]:
        """One row group with its values (kept for the next call: a group may span two partitions)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._cache is not None and self._cache[0] == number:
            return self._cache[1]
        minute, inst, code = self._keys(number)
        column = self._file.read_row_group(number, columns=["value"]).column("value")
        if not (
            pa.types.is_floating(column.type) or pa.types.is_integer(column.type) or pa.types.is_decimal(column.type)
        ):
            raise MetricsFileError(f"{self.path}: row group {number}: value must be a number, found {column.type}")
        value = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
        loaded = code >= 0
        bad = loaded & ~(np.isfinite(value) & (value >= 0))
        if bad.any():
            raise MetricsFileError(
                f"{self.path}: row group {number}: a value that is not a finite, non-negative number"
            )
        self.rows_read += len(value)
        found = (minute, inst, code, value)
        self._cache = (number, found)
        return found


def sorted_copy(path: Path, folder: Path) -> Path:
    """A copy of ``path`` sorted by time in row groups of :data:`GROUP_MINUTES` (DuckDB, spilling to ``folder``)."""
    import duckdb

    target = folder / "sorted.parquet"
    con = duckdb.connect(config={"threads": 1, "memory_limit": "1GB", "preserve_insertion_order": True})
    try:
        con.execute(f"SET temp_directory = '{str(folder / 'spill').replace(chr(39), chr(39) * 2)}'")
        con.execute("SET TimeZone = 'UTC'")
        query = (  # noqa: S608 - our own scratch path; the user's file is a parameter
            "COPY (SELECT CAST(epoch(CAST(timestamp AS TIMESTAMPTZ)) AS BIGINT) AS timestamp, "
            "CAST(instance_id AS VARCHAR) AS instance_id, CAST(metric AS VARCHAR) AS metric, "
            "CAST(value AS DOUBLE) AS value FROM read_parquet(?) ORDER BY 1) TO '{target}' "
            "(FORMAT parquet, ROW_GROUP_SIZE 1000000)"
        ).format(target=str(target).replace("'", "''"))
        con.execute(query, [str(path)])
    except duckdb.Error as error:
        raise MetricsFileError(f"{path}: cannot read the Parquet file ({str(error).splitlines()[0]})") from None
    finally:
        con.close()
    return target


def open_samples(path: Path, memory_unit: str, folder: Path) -> ParquetSamples:
    """The file replayed straight from its row groups when they are in time order; else its sorted copy."""
    try:
        return ParquetSamples(path, memory_unit).open()
    except Unsure:
        return ParquetSamples(sorted_copy(path, folder), memory_unit).open()


def epoch(at: dt.datetime) -> int:
    return int(at.timestamp())


def chunks(total: int, size: int) -> Iterator[tuple[int, int]]:
    for first in range(0, total, size):
        yield first, min(total, first + size)


def workload_groups(instances: list[Any], start: int, minutes: int) -> Iterator[tuple[Any, Any, Any, Any]]:
    """Generated instances as time-ordered row groups of :data:`GROUP_MINUTES`, values exactly as the CSV writer
    prints them (so a Parquet file and the CSV of one workload replay to the same decisions)."""
    import numpy as np

    names = [i.id for i in instances]
    metrics: list[str] = []
    per_metric: dict[str, Any] = {}
    for position, instance in enumerate(instances):
        for name, values in instance._metric_lists().items():
            if name not in per_metric:
                metrics.append(name)
                per_metric[name] = np.full((len(instances), minutes), np.nan)
            per_metric[name][position] = [math.nan if v is None else v for v in values]
    for name, block in per_metric.items():
        # the CSV's text: whole MB for memory, 2 decimals for power, 1 for the rest, read back as float() reads it
        texts = {}
        flat = block.reshape(-1)
        present = ~np.isnan(flat)
        for k in np.nonzero(present)[0].tolist():
            value = flat[k]
            text = (
                str(int(value))
                if name == GPU_MEMORY_USED
                else f"{value:.2f}"
                if name == "gpu_power_draw"
                else f"{value:.1f}"
            )
            texts[k] = float(text)
        for k, value in texts.items():
            flat[k] = value
    for first in range(0, minutes, GROUP_MINUTES):
        last = min(minutes, first + GROUP_MINUTES)
        seconds, indices, codes, values = [], [], [], []
        for code, name in enumerate(metrics):
            block = per_metric[name][:, first:last]
            inst, minute = np.nonzero(~np.isnan(block))
            seconds.append(start + (first + minute) * 60)
            indices.append(inst.astype(np.int32))
            codes.append(np.full(len(inst), code, dtype=np.int8))
            values.append(block[inst, minute])
        order = np.argsort(np.concatenate(seconds), kind="stable")
        yield (
            np.concatenate(seconds)[order],
            (np.concatenate(indices)[order], names),
            (np.concatenate(codes)[order], metrics),
            np.concatenate(values)[order],
        )
