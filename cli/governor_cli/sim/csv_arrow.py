"""The metrics CSV read by Arrow's multithreaded CSV parser, each batch judged as the row-by-row reader judges it.

Arrow splits the file into fields (no quoting: a quote anywhere sends the file to the careful reader) and hands each
batch over with the timestamp, instance id and metric columns dictionary-encoded. What a value means is then decided
once per distinct string, by the row-by-row reader's own code: ``parse_timestamp`` for times (ISO 8601 or epoch
seconds), ``str.strip`` and the same printable and length checks for ids and metric names. Values are converted by
Arrow's cast to float64, which accepts a subset of what ``float()`` accepts and rounds correctly, as ``float()`` does
(fast_float); anything it refuses, and any value that is negative or not finite, makes the reader :class:`Unsure`.

So a batch either gives exactly the samples ``parse_metrics`` would give for its rows, or raises :class:`Unsure` and
the careful reader decides (and names the line). Rows of metrics the replay does not read are skipped, as that
reader skips them; only what would change how it splits a line or decodes the file is checked on them.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
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
                    check_utf8=True,
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
            except (pa.ArrowInvalid, pa.ArrowTypeError) as error:  # a line without four fields, bad UTF-8, ...
                raise Unsure(str(error).splitlines()[0]) from None
            if batch.num_rows:
                yield self.decode(batch)

    def decode(self, batch: Any) -> tuple[Any, Any, Any, Any]:
        """One batch's loaded rows, each checked as ``parse_metrics`` checks it; :class:`Unsure` on a doubt."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        stamps, ids, names, values = batch.columns
        code = self._lookup(names, None, self._code)[names.indices.to_numpy(zero_copy_only=False)]
        keep = code >= 0
        every = bool(keep.all())
        raw = values.buffers()[2]
        if raw is not None and raw.size:
            data = np.frombuffer(raw, dtype=np.uint8)
            if (data == _QUOTE).any():
                raise Unsure("a quote in a value")
            if pc.max(pc.binary_length(values)).as_py() > FIELD_LIMIT:
                raise Unsure("a field longer than the csv module reads")
        if not keep.any():
            self._lookup(stamps, np.zeros(0, dtype=np.int64), self._minute)  # only checks quotes and lengths
            self._lookup(ids, np.zeros(0, dtype=np.int64), self._instance)
            return (np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.int8), np.empty(0, np.float64))
        rows = None if every else np.nonzero(keep)[0]
        minute = self._column(stamps, rows, self._minute)
        inst = self._column(ids, rows, self._instance)
        if (minute < 0).any() or (inst < 0).any():
            raise Unsure(self.refused)
        if not every:
            code = code[rows]
            values = values.take(pa.array(rows))
        try:
            value = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            raise Unsure(f"value: {str(error).splitlines()[0]}") from None
        bad = ~(np.isfinite(value) & (value >= 0))
        if bad.any():
            raw = values[int(np.argmax(bad))].as_py()
            raise Unsure(f"value {raw!r} must be a finite, non-negative number")
        memory = code == self.memory_code
        if memory.any():
            value = np.where(memory, value * self.scale, value)
        return inst.astype(np.int32), minute, code, value

    def _column(self, column: Any, rows: Any, judge: Any) -> Any:
        """Each row's judgement of its dictionary entry (entries of skipped rows only checked, never judged)."""
        import numpy as np

        indices = column.indices.to_numpy(zero_copy_only=False)
        if rows is None:
            return self._lookup(column, None, judge)[indices]
        picked = indices[rows]
        used = np.zeros(len(column.dictionary), dtype=bool)
        used[picked] = True
        return self._lookup(column, np.nonzero(used)[0], judge)[picked]

    def _lookup(self, column: Any, used: Any, judge: Any) -> Any:
        """``judge`` of every entry of ``column``'s dictionary (only the ``used`` ones, if given; -1 elsewhere).
        Every entry is checked for what would make the csv module split its line differently."""
        import numpy as np

        entries = column.dictionary.to_pylist()
        for entry in entries:
            if '"' in entry:
                raise Unsure(f"a quote in {entry[:40]!r}")
            if len(entry) > FIELD_LIMIT:
                raise Unsure("a field longer than the csv module reads")
        found = np.full(len(entries), -1, dtype=np.int64)
        for k in range(len(entries)) if used is None else used.tolist():
            found[k] = judge(entries[k])
        return found

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
