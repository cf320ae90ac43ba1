"""The metrics CSV read by Arrow's multithreaded CSV parser, each batch judged as the row-by-row reader judges it.

Arrow splits the file into fields (no quoting: a quote anywhere sends the file to the careful reader) and hands each
batch over with the timestamp, instance id and metric columns dictionary-encoded. What a value means is then decided
once per distinct string (the first time it is seen: later batches look it up), by the row-by-row reader's own code:
``parse_timestamp`` for times (ISO 8601 or epoch seconds), ``str.strip`` and the same printable and length checks for
ids and metric names; each distinct string is decoded from UTF-8 by Python, as that reader decodes the file (Arrow is
not asked to check every row's bytes: that was a tenth of its parsing time), and a value must be ASCII. Values are
converted by Arrow's cast to float64, which accepts a subset of what ``float()`` accepts and rounds correctly, as
``float()`` does (fast_float); anything it refuses, and any value that is negative or not finite, makes the reader
:class:`Unsure`.

So a batch either gives exactly the samples ``parse_metrics`` would give for its rows, or raises :class:`Unsure` and
the careful reader decides (and names the line). Rows of metrics the replay does not read are skipped, as that
reader skips them; only what would change how it splits a line or decodes the file is checked on them.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterator
from typing import IO, Any

from governor.idle.domain import GPU_MEMORY_USED, MEMORY_UNITS
from governor_cli.sim.metrics_file import HEADER, Unsure, parse_timestamp

BLOCK_BYTES = 4 << 20  # bytes Arrow parses at a time (a batch: about 65,000 rows of a usual export)
FIELD_LIMIT = 131_072  # csv.field_size_limit()'s default: the row-by-row reader refuses a longer field
_CACHE_LIMIT = 1 << 20  # distinct timestamps remembered between batches (a month of minutes is 43,200)
_QUOTE = ord('"')


def read_header(handle: IO[bytes]) -> None:
    """Consume the header line, checked as the row-by-row reader checks it (a BOM, case and spaces allowed)."""
    line = handle.readline(FIELD_LIMIT)
    try:
        text = line.decode("utf-8-sig")
        fields = next(csv.reader([text]), [])
    except (UnicodeDecodeError, csv.Error):
        raise Unsure("header") from None
    if not text.endswith("\n") or '"' in text or [h.strip().lower() for h in fields] != HEADER:
        raise Unsure("header")


class Counted(io.RawIOBase):
    """A readable stream that counts the bytes read through it (the progress bar's position)."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        got = self.raw.readinto(buffer)  # type: ignore[attr-defined]
        self.count += got or 0
        return got or 0


class Decoder:
    """Turns Arrow batches into (first-seen instance index int32, epoch minute int64, metric code int8, value float64)
    of the rows the replay reads; ``positions`` gives each instance id its index in the order first seen."""

    def __init__(self, memory_unit: str, loaded: tuple[str, ...]) -> None:
        self.loaded = loaded
        self.memory_code = loaded.index(GPU_MEMORY_USED)
        self.scale = MEMORY_UNITS[memory_unit]
        self.positions: dict[str, int] = {}
        self._codes: dict[str, int] = {}
        self._ids: dict[str, int] = {}
        self._minutes: dict[str, int] = {}
        self._stamps: dict[str, float] = {}
        self.refused = ""  # what the last refused timestamp or id was, as the row-by-row reader would say it

    def batches(self, handle: IO[bytes]) -> Iterator[tuple[Any, Any, Any, Any]]:
        """Every batch of ``handle`` (positioned after the header) decoded; :class:`Unsure` on the first doubt."""
        import pyarrow as pa
        import pyarrow.csv as pacsv

        text = pa.dictionary(pa.int32(), pa.string())
        try:
            reader = pacsv.open_csv(
                handle,
                read_options=pacsv.ReadOptions(column_names=HEADER, block_size=BLOCK_BYTES, use_threads=True),
                parse_options=pacsv.ParseOptions(
                    delimiter=",", quote_char=False, escape_char=False, newlines_in_values=False,
                    ignore_empty_lines=True,
                ),
                convert_options=pacsv.ConvertOptions(
                    column_types={"timestamp": text, "instance_id": text, "metric": text, "value": pa.string()},
                    strings_can_be_null=False,
                    check_utf8=False,  # checked here, where cheaper: see _lookup and _check_values
                ),
            )  # fmt: skip
        except StopIteration:
            return  # nothing after the header
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
            raise Unsure(str(error).splitlines()[0]) from None
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except (pa.ArrowInvalid, pa.ArrowTypeError) as error:  # a line without four fields, ...
                raise Unsure(str(error).splitlines()[0]) from None
            if batch.num_rows:
                yield self.decode(batch)

    def decode(self, batch: Any) -> tuple[Any, Any, Any, Any]:
        """One batch's loaded rows, each checked as ``parse_metrics`` checks it; :class:`Unsure` on a doubt."""
        import numpy as np
        import pyarrow as pa

        stamps, ids, names, values = batch.columns
        _check_values(values)
        judged = self._lookup(names, None, self._codes, self._code)
        code = judged.astype(np.int8)[_indices(names)]
        if judged.max() < 0:  # no row of a loaded metric
            self._lookup(stamps, np.zeros(0, dtype=np.int64), self._minutes, self._minute)  # only checks entries
            self._lookup(ids, np.zeros(0, dtype=np.int64), self._ids, self._instance)
            return (np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.int8), np.empty(0, np.float64))
        every = bool(judged.min() >= 0)
        rows = None if every else np.flatnonzero(code >= 0)
        minute = self._column(stamps, rows, self._minutes, self._minute)
        inst = self._column(ids, rows, self._ids, self._instance, np.int32)
        if not every:
            code = code[rows]
            values = _call("take", values, pa.array(rows))
        try:
            value = _call("cast", values, options=_float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            raise Unsure(f"value: {str(error).splitlines()[0]}") from None
        if not (value.min() >= 0 and value.max() < math.inf):  # NaN fails both
            bad = ~(np.isfinite(value) & (value >= 0))
            raw = values[int(np.argmax(bad))].as_py()
            raise Unsure(f"value {raw!r} must be a finite, non-negative number")
        if self.scale != 1.0:
            memory = code == self.memory_code
            if memory.any():
                value = np.where(memory, value * self.scale, value)
        return inst, minute, code, value

    def _column(
        self, column: Any, rows: Any, cache: dict[str, int], judge: Callable[[str], int], dtype: Any = None
    ) -> Any:
        """Each row's judgement of its dictionary entry (entries only skipped rows use are checked, never judged);
        :class:`Unsure` if an entry a kept row uses is refused."""
        import numpy as np

        indices = _indices(column)
        if rows is None:
            found = self._lookup(column, None, cache, judge, dtype)
            if (found < 0).any():  # every entry is some row's (the dictionary is the batch's own)
                raise Unsure(self.refused)
            return found[indices]
        picked = indices[rows]
        used = np.zeros(len(column.dictionary), dtype=bool)
        used[picked] = True
        found = self._lookup(column, np.flatnonzero(used), cache, judge, dtype)
        if (found[used] < 0).any():
            raise Unsure(self.refused)
        return found[picked]

    def _lookup(
        self, column: Any, used: Any, cache: dict[str, int], judge: Callable[[str], int], dtype: Any = None
    ) -> Any:
        """The judgement of every entry of ``column``'s dictionary (-1: refused, or not among the ``used`` entries
        when those are given). An entry met for the first time is checked for what would make the csv module split
        its line differently, then judged if used; ``judge`` keeps what it accepts in ``cache``."""
        import numpy as np

        try:
            entries = column.dictionary.to_pylist()  # decoded as Python decodes the file for the row-by-row reader
        except UnicodeDecodeError:
            raise Unsure("a field that is not UTF-8") from None
        get = cache.get
        found = [get(entry, -2) for entry in entries]
        if -2 in found:
            wanted = None if used is None else set(used.tolist())
            for k, entry in enumerate(entries):
                if found[k] == -2:
                    if '"' in entry:
                        raise Unsure(f"a quote in {entry[:40]!r}")
                    if len(entry) > FIELD_LIMIT:
                        raise Unsure("a field longer than the csv module reads")
                    found[k] = judge(entry) if wanted is None or k in wanted else -1
        return np.array(found, dtype=dtype or np.int64)

    def _code(self, name: str) -> int:
        """The metric's code, -1 for a metric the replay skips (the row-by-row reader strips the name first)."""
        found = self._codes.get(name)
        if found is None:
            metric = name.strip()
            found = self._codes[name] = self.loaded.index(metric) if metric in self.loaded else -1
        return found

    def _instance(self, text: str) -> int:
        """The id's index (first seen first); -1 for one the row-by-row reader refuses."""
        found = self._ids.get(text)
        if found is None:
            instance_id = text.strip()
            if not instance_id or not instance_id.isprintable() or len(instance_id) > 256:
                self.refused = f"instance_id {instance_id[:40]!r} is not a printable id"
                return -1
            found = self._ids[text] = self.positions.setdefault(instance_id, len(self.positions))
        return found

    def _minute(self, text: str) -> int:
        """The epoch minute of a timestamp as ``parse_timestamp`` reads it; -1 for one it refuses."""
        found = self._minutes.get(text)
        if found is None:
            if len(self._minutes) >= _CACHE_LIMIT:
                self._minutes.clear()
                self._stamps.clear()
            try:
                when = parse_timestamp(text, self._stamps)
            except ValueError as error:
                self.refused = f"timestamp {error}"
                return -1
            found = self._minutes[text] = math.floor((when - when % 60) / 60)
        return found


def _indices(column: Any) -> Any:
    """A dictionary column's indices as NumPy (no copy)."""
    return column.indices.to_numpy(zero_copy_only=False)


def _check_values(values: Any) -> None:
    """:class:`Unsure` if a value of the batch (of any metric) holds a quote or is longer than the csv module reads
    (it would split its line differently), or a byte outside ASCII (a number is ASCII; the careful reader decides
    whether the file is UTF-8 at all)."""
    import numpy as np

    offsets, data = values.buffers()[1:3]
    if data is None or not data.size:
        return
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.max() >= 0x80:
        raise Unsure("a value that is not ASCII")
    if (raw == _QUOTE).any():
        raise Unsure("a quote in a value")
    ends = np.frombuffer(offsets, dtype=np.int32)[values.offset : values.offset + len(values) + 1]
    if len(ends) > 1 and int(np.diff(ends).max()) > FIELD_LIMIT:
        raise Unsure("a field longer than the csv module reads")


def _call(name: str, *args: Any, options: Any = None) -> Any:
    """An Arrow compute kernel by name: ``pyarrow.compute`` itself costs a fresh process 0.05 CPU-s to import (it
    writes a Python wrapper and docstring for each of its hundreds of kernels) for the two this reader calls."""
    from pyarrow._compute import call_function

    return call_function(name, list(args), options)


def _float64() -> Any:
    """Options of a checked cast to float64 (what ``pyarrow.compute.cast(values, pa.float64())`` passes)."""
    import pyarrow as pa
    from pyarrow._compute import CastOptions

    return CastOptions.safe(pa.float64())
