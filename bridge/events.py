"""The event-log schema of benchmark and audit runs, and a buffered writer of it.

One schema (docs/events.md) for every process of a run: clients, benchmark drivers and the
processes that sample nodes write it; ``bridge.audit`` reads it. This module needs only the
standard library (pyarrow, when installed, for Parquet), so the client and the audit can
both import it without pulling in Twisted or PySpark.

A run folder holds ``events/run=RUN/process=PROCESS/part-PID-N.(parquet|jsonl)``: ``run``
and ``process`` are partition columns (the folder names), the other fields are in the files.
The writer appends a tuple per event to a list and writes a whole batch at a time, to a
hidden temporary name renamed into place, so a reader never sees half a part.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import attrs

SEND_INVOKED: Final = "send-invoked"
SEND_CONFIRMED: Final = "send-confirmed"
SEND_FAILED: Final = "send-failed"
SEND_UNKNOWN: Final = "send-unknown"
RECEIVED: Final = "received"
ACKED: Final = "acked"
FLOW_PAUSED: Final = "flow-paused"
FLOW_RESUMED: Final = "flow-resumed"
RSS_SAMPLE: Final = "rss-sample"
FAULT_INJECTED: Final = "fault-injected"

KINDS: Final = frozenset(
    {
        SEND_INVOKED,
        SEND_CONFIRMED,
        SEND_FAILED,
        SEND_UNKNOWN,
        RECEIVED,
        ACKED,
        FLOW_PAUSED,
        FLOW_RESUMED,
        RSS_SAMPLE,
        FAULT_INJECTED,
    }
)

FIELDS: Final = (
    ("kind", "string"),
    ("ts", "long"),
    ("producer", "string"),
    ("seq", "long"),
    ("message", "string"),
    ("node", "string"),
    ("address", "string"),
    ("size", "long"),
    ("detail", "string"),
)
"""The fields in every part file, in order, with their type (``string`` or ``long``)."""

REQUIRED: Final = ("kind", "ts")
"""Fields no event may lack."""

PARTITIONS: Final = ("run", "process")
"""The partition columns, taken from the folder names."""

EVENTS_DIR: Final = "events"
TRACE_PRODUCER: Final = "txb.producer"
TRACE_SEQ: Final = "txb.seq"
"""Message headers a traced client stamps on its sends (producer id and sequence), and
reads back from deliveries, so that a received message names the send it came from."""

_NAME = re.compile(r"^[A-Za-z0-9_.@:+-]+$")

Row = tuple[
    str, int, str | None, int | None, str | None, str | None, str | None, int | None, str | None
]


def parquet_available() -> bool:
    """Whether pyarrow can be imported, so the writer can write Parquet."""
    try:
        import pyarrow  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def partition_dir(run_dir: Path, run: str, process: str) -> Path:
    """The folder of ``process``'s events of ``run`` in ``run_dir``."""
    for what, name in (("run", run), ("process", process)):
        if not _NAME.match(name):
            raise ValueError(f"{what} name {name!r}: use letters, digits and _.@:+- only")
    return run_dir / EVENTS_DIR / f"run={run}" / f"process={process}"


@attrs.define(eq=False)
class EventWriter:
    """Buffers events of one process and writes them as part files in batches.

    ``record`` appends one tuple (no I/O); a batch is written once ``batch_size`` events
    are buffered or ``flush_seconds`` have passed since its first event (checked on each
    ``record``, with no timer), and by ``flush``/``close``. Writing a batch costs
    milliseconds on the caller's thread, once per batch. ``clock`` gives nanoseconds since
    the epoch (``time.time_ns``), so processes on different hosts share a time axis.
    """

    run_dir: Path
    run: str
    process: str
    format: str = attrs.field(default="auto")
    batch_size: int = 50_000
    flush_seconds: float = 5.0
    clock: Callable[[], int] = time.time_ns
    _rows: list[Row] = attrs.field(factory=list, init=False)
    _batch_started: int = attrs.field(default=0, init=False)
    _parts: int = attrs.field(default=0, init=False)
    _directory: Path = attrs.field(init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        if self.format == "auto":
            self.format = "parquet" if parquet_available() else "jsonl"
        if self.format not in ("parquet", "jsonl"):
            raise ValueError(f"event log format {self.format!r}: parquet, jsonl or auto")
        self._directory = partition_dir(self.run_dir, self.run, self.process)
        self._directory.mkdir(parents=True, exist_ok=True)

    def record(
        self,
        kind: str,
        producer: str | None = None,
        seq: int | None = None,
        *,
        message: str | None = None,
        node: str | None = None,
        address: str | None = None,
        size: int | None = None,
        detail: str | None = None,
        ts: int | None = None,
    ) -> None:
        """Buffer one event, stamped now unless ``ts`` is given."""
        now = self.clock() if ts is None else ts
        rows = self._rows
        if not rows:
            self._batch_started = now
        rows.append((kind, now, producer, seq, message, node, address, size, detail))
        if len(rows) >= self.batch_size or now - self._batch_started > self.flush_seconds * 1e9:
            self.flush()

    @property
    def buffered(self) -> int:
        return len(self._rows)

    def flush(self) -> None:
        """Write the buffered events as one part file (nothing if there are none)."""
        if self._closed:
            raise ValueError(f"the event writer of {self.process!r} is closed")
        rows, self._rows = self._rows, []
        if not rows:
            return
        name = f"part-{os.getpid()}-{self._parts:05d}.{self.format}"
        self._parts += 1
        temporary = self._directory / f".{name}.tmp"
        if self.format == "parquet":
            _write_parquet(temporary, rows)
        else:
            _write_jsonl(temporary, rows)
        temporary.rename(self._directory / name)

    def close(self) -> None:
        """Write what is buffered; no more events after this."""
        if not self._closed:
            self.flush()
            self._closed = True


def _write_jsonl(path: Path, rows: list[Row]) -> None:
    names = [name for name, _ in FIELDS]
    encode = json.JSONEncoder(separators=(",", ":")).encode
    with path.open("w", encoding="utf-8") as file:
        file.writelines(
            encode({k: v for k, v in zip(names, row, strict=True) if v is not None}) + "\n"
            for row in rows
        )


def arrow_schema() -> Any:
    """The part files' schema as a ``pyarrow.Schema``."""
    import pyarrow as pa  # noqa: PLC0415

    types = {"string": pa.string(), "long": pa.int64()}
    return pa.schema(
        [pa.field(name, types[kind], nullable=name not in REQUIRED) for name, kind in FIELDS]
    )


def _write_parquet(path: Path, rows: list[Row]) -> None:
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    schema = arrow_schema()
    columns = [
        pa.array(column, type=field.type)
        for column, field in zip(zip(*rows, strict=True), schema, strict=True)
    ]
    pq.write_table(pa.Table.from_arrays(columns, schema=schema), path)
