"""A metrics CSV converted in one pass into time partitions on disk, then replayed from them.

:mod:`governor_cli.sim.csv_arrow` decodes the file a batch at a time; each batch's samples are appended, as packed
14-byte records (instance, minute within the partition, metric, value), to the file of the 4-hour partition they
fall in, and what the replay must know before its first sweep is kept on the way: each partition's minutes holding a
sample, and per instance its first minute there and whether it reports GPU utilisation. The file may be in any order
(by time, by instance, or neither): memory holds the write buffers, the fleet and the window, never the file, and
the disk a quarter of the CSV's bytes. A file that is not a regular file (``--metrics <(zstdcat export.csv.zst)``,
``/dev/stdin``) is read the same way, once.

:class:`Spilled` then offers the replay (:func:`governor_cli.sim.columnar.replay_columnar`) what every source offers:
the ids, the minutes, the partitions, the membership of each stretch and ``fill``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from governor.idle.domain import GPU_UTILIZATION
from governor_cli.sim.metrics_file import Unsure

PART_MINUTES = 240  # the replay's partition (columnar.PART_MINUTES)
FLUSH_BYTES = 64 << 20  # buffered records written out once they reach this
HELD_CSV_BYTES = 1 << 30  # a regular file up to this size keeps its samples in memory (about a quarter of its bytes)
_NONE = 2**63 - 1  # no minute yet


def _record() -> Any:
    import numpy as np

    return np.dtype([("inst", "<i4"), ("minute", "u1"), ("code", "i1"), ("value", "<f8")])


@dataclass
class _Part:
    """What one partition holds, kept while writing: its minutes with a sample, and per instance (first-seen index)
    its first minute in it and whether it reports GPU utilisation; its samples not yet on disk, as columns
    (first-seen instance int32, minute within the partition uint8, metric code int8, value float64)."""

    present: Any
    first: Any
    gpu: Any
    pending: list[tuple[Any, Any, Any, Any]] = field(default_factory=list)

    def grow(self, size: int) -> None:
        import numpy as np

        if len(self.first) < size:
            more = max(size, 2 * len(self.first)) - len(self.first)
            self.first = np.concatenate([self.first, np.full(more, _NONE, dtype=np.int64)])
            self.gpu = np.concatenate([self.gpu, np.zeros(more, dtype=bool)])


class Writer:
    """Appends decoded samples to their partitions: held in memory (``hold``: a file that fits), else written to the
    partitions' files under ``folder`` as packed 14-byte records every :data:`FLUSH_BYTES`."""

    def __init__(self, folder: Path, loaded: tuple[str, ...], hold: bool = False) -> None:
        import numpy as np

        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.loaded = loaded
        self.hold = hold
        self.gpu_code = loaded.index(GPU_UTILIZATION)
        self.parts: dict[int, _Part] = {}
        self.seen = np.zeros(len(loaded), dtype=bool)
        self.rows = 0
        self._buffered = 0

    def add(self, inst: Any, minute: Any, code: Any, value: Any, instances: int) -> None:
        """One batch's samples (first-seen instance index, epoch minute, metric code, value); ``instances``: how many
        ids are known so far."""
        import numpy as np

        if not len(minute):
            return
        for unseen in np.flatnonzero(~self.seen).tolist():  # soon none: a file holds the same few metrics
            self.seen[unseen] = bool((code == unseen).any())
        first, last = int(minute.min()) // PART_MINUTES, int(minute.max()) // PART_MINUTES
        if first == last:
            self._part(first, inst, minute, code, value, instances)
        else:
            part = minute // PART_MINUTES
            order = np.argsort(part, kind="stable")
            part = part[order]
            edges = [0, *(np.flatnonzero(part[1:] != part[:-1]) + 1).tolist(), len(part)]
            for a, b in itertools.pairwise(edges):
                rows = order[a:b]
                self._part(int(part[a]), inst[rows], minute[rows], code[rows], value[rows], instances)
        self.rows += len(minute)
        if not self.hold and self._buffered >= FLUSH_BYTES:
            self.flush()

    def _part(self, number: int, inst: Any, minute: Any, code: Any, value: Any, instances: int) -> None:
        import numpy as np

        held = self.parts.get(number)
        if held is None:
            held = self.parts[number] = _Part(
                np.zeros(PART_MINUTES, dtype=bool), np.empty(0, dtype=np.int64), np.empty(0, dtype=bool)
            )
        held.grow(instances)
        offset = (minute - number * PART_MINUTES).astype(np.uint8)
        held.present[offset] = True
        np.minimum.at(held.first, inst, minute)
        held.gpu[inst[code == self.gpu_code]] = True
        held.pending.append((inst, offset, code, value))
        self._buffered += 14 * len(inst)

    def flush(self) -> None:
        """Write every partition's pending samples to its file, as packed records."""
        for number, held in self.parts.items():
            if held.pending:
                with (self.folder / f"part{number}.bin").open("ab") as out:
                    for inst, offset, code, value in held.pending:
                        records = _packed(inst, offset, code, value)
                        records.tofile(out)
                held.pending = []
        self._buffered = 0


def _packed(inst: Any, offset: Any, code: Any, value: Any) -> Any:
    import numpy as np

    records = np.empty(len(inst), dtype=_record())
    records["inst"], records["minute"], records["code"], records["value"] = inst, offset, code, value
    return records


@dataclass
class Spilled:
    """A metrics file as partitions (see :class:`Writer`), in memory or on disk: what
    :class:`governor_cli.sim.columnar.Samples` offers the replay, read a partition at a time."""

    folder: Path
    ids: list[str]
    minutes: Any
    parts: set[int]
    metrics: tuple[str, ...]
    rows: int
    part_minutes: int = PART_MINUTES
    base: int = 0
    _summary: dict[int, _Part] = field(default_factory=dict, repr=False)
    _sorted: Any = None  # first-seen index -> index in ``ids`` (None: the same)
    _row: Any = None  # metric code -> row of the replay's arrays
    _gpu_code: int = 0
    _cache: tuple[int, list[tuple[Any, Any, Any, Any]]] | None = None

    def _chunks(self, part: int) -> list[tuple[Any, Any, Any, Any]]:
        """One partition's samples, as columns in chunks: first-seen instance (int32), minute within the partition
        (uint8), metric code, value. Held in memory, or read from its file (kept for the next call: the window may
        load a partition in two pieces)."""
        import numpy as np

        pending = self._summary[part].pending
        if pending:
            return pending
        if self._cache is None or self._cache[0] != part:
            self._cache = None  # the previous partition is released before the next is read
            records = np.fromfile(self.folder / f"part{part}.bin", dtype=_record())
            # a packed record's value is unaligned: ufunc.at takes its fast path only on an aligned array
            value = np.ascontiguousarray(records["value"])
            self._cache = (part, [(records["inst"], records["minute"], records["code"], value)])
        return self._cache[1]

    def _index(self, inst: Any) -> Any:
        """First-seen instance indexes as indexes in ``ids`` (int64)."""
        import numpy as np

        return inst.astype(np.int64) if self._sorted is None else self._sorted[inst]

    def membership(self, spans: list[tuple[int, int]]) -> tuple[Any, Any, Any, Any]:
        """(instance, stretch, first minute, reports GPU) per instance and stretch holding samples."""
        import numpy as np

        n = len(self.ids)
        out: list[tuple[Any, Any, Any, Any]] = []
        for sid, (lo, hi) in enumerate(spans):
            first = np.full(n, _NONE, dtype=np.int64)
            gpu = np.zeros(n, dtype=bool)
            for number in sorted(self.parts):
                a, b = number * PART_MINUTES, (number + 1) * PART_MINUTES - 1
                if b < lo or a > hi:
                    continue
                if lo <= a and b <= hi:
                    firsts, flags = self._summary[number].first[:n], self._summary[number].gpu[:n]
                    if self._sorted is not None:  # by first-seen index: into the order of ``ids``
                        firsts = _reordered(firsts, self._sorted, _NONE)
                        flags = _reordered(flags, self._sorted, False)
                else:  # the partition straddles a stretch's edge: its samples decide
                    firsts = np.full(n, _NONE, dtype=np.int64)
                    flags = np.zeros(n, dtype=bool)
                    for inst, offset, code, _ in self._chunks(number):
                        minute = offset.astype(np.int64) + a
                        keep = (minute >= lo) & (minute <= hi)
                        index = self._index(inst)
                        np.minimum.at(firsts, index[keep], minute[keep])
                        flags[index[keep & (code == self._gpu_code)]] = True
                np.minimum(first[: len(firsts)], firsts, out=first[: len(firsts)])
                gpu[: len(flags)] |= flags
            rows = np.nonzero(first < _NONE)[0]
            out.append((rows, np.full(len(rows), sid, dtype=np.int64), first[rows], gpu[rows]))
        return tuple(np.concatenate([o[k] for o in out]) for k in range(4))  # type: ignore[return-value]

    def fill(self, data: Any, lo: int, part: int, start: int, stop: int) -> None:
        """Write minutes ``start`` .. ``stop`` - 1 of partition ``part`` into ``data`` (whose minute 0 is ``lo``); two
        samples in one minute keep the larger, as the row-by-row reader does."""
        import numpy as np

        first = part * PART_MINUTES
        width = data.shape[2]
        stride = self._row * (len(self.ids) * width)  # metric code -> where its row of ``data`` starts
        partial = start > first or stop < first + PART_MINUTES
        for inst, offset, code, value in self._chunks(part):
            if partial:
                keep = (offset >= start - first) & (offset < stop - first)
                inst, offset, code, value = inst[keep], offset[keep], code[keep], value[keep]
            flat = stride[code]
            flat += self._index(inst) * width
            flat += offset
            flat += first - lo
            np.fmax.at(data.reshape(-1), flat, value)


def _reordered(by_first_seen: Any, order: Any, fill: Any) -> Any:
    """Values kept by first-seen index (of the ids known when the partition last grew), put in the order of ``ids``
    (``order``: first-seen index -> that order); ``fill`` for the ids seen later."""
    import numpy as np

    out = np.full(len(order), fill, dtype=by_first_seen.dtype)
    out[order[: len(by_first_seen)]] = by_first_seen
    return out


def spill(
    handle: IO[bytes],
    memory_unit: str,
    folder: Path,
    loaded: tuple[str, ...],
    progress: Callable[[], None] | None = None,
    hold: bool = False,
) -> Spilled:
    """Read ``handle`` (the whole CSV, header first) into partitions, in memory if ``hold`` else under ``folder``;
    :class:`Unsure` when a row needs the careful reader. ``progress`` is called after each batch."""
    import numpy as np

    from governor_cli.sim.csv_arrow import Decoder, read_header

    read_header(handle)
    decoder = Decoder(memory_unit, loaded)
    writer = Writer(folder, loaded, hold)
    for inst, minute, code, value in decoder.batches(handle):
        writer.add(inst, minute, code, value, len(decoder.positions))
        if progress is not None:
            progress()
    if not hold:
        writer.flush()
    if not writer.rows:
        raise Unsure("no samples")
    positions = decoder.positions
    ids = sorted(positions)
    order = np.empty(len(ids), dtype=np.int64)
    order[[positions[i] for i in ids]] = np.arange(len(ids))
    present = np.nonzero(writer.seen)[0]
    row = np.full(len(loaded), -1, dtype=np.int64)
    row[present] = np.arange(len(present))
    minutes = np.concatenate(
        [number * PART_MINUTES + np.flatnonzero(held.present) for number, held in sorted(writer.parts.items())]
    )
    return Spilled(
        folder,
        ids,
        minutes.astype(np.int64),
        set(writer.parts),
        tuple(loaded[c] for c in present.tolist()),
        writer.rows,
        _summary=writer.parts,
        _sorted=None if (order == np.arange(len(ids))).all() else order,  # ids often come in order
        _row=row,
        _gpu_code=loaded.index(GPU_UTILIZATION),
    )


def read_csv(path: Path, memory_unit: str, folder: Path, loaded: tuple[str, ...]) -> Spilled:
    """:func:`spill` of the file at ``path`` (a regular file or a pipe), with its progress in bytes on a terminal."""
    import io

    from governor_cli import progress
    from governor_cli.sim.csv_arrow import Counted

    size = path.stat().st_size if path.is_file() else None
    with path.open("rb", buffering=0) as raw:
        counted = Counted(raw)
        handle = io.BufferedReader(counted, 1 << 20)
        shown = progress.bar(size, f"reading {path.name}", "B", scale=True)
        try:
            return spill(
                handle,
                memory_unit,
                folder,
                loaded,
                lambda: shown.update(counted.count - shown.n),
                hold=size is not None and size <= HELD_CSV_BYTES,
            )
        finally:
            shown.close()
