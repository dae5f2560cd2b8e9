"""Event logs with known answers, written through the real writer (``bridge.events``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bridge import events

NS = 1_000_000_000
MS = 1_000_000
T0 = 1_700_000_000 * NS
"""The runs' first event: timestamps are given in milliseconds after it."""


class RunLog:
    """Writes events of several processes of one run, at given times, in one format."""

    def __init__(self, run_dir: Path, run: str = "r1", format: str = "parquet") -> None:
        self.run_dir = run_dir
        self.run = run
        self.format = format
        self.writers: dict[str, events.EventWriter] = {}

    def add(
        self,
        process: str,
        kind: str,
        at_ms: float,
        producer: str | None = None,
        seq: int | None = None,
        **fields: Any,
    ) -> None:
        writer = self.writers.get(process)
        if writer is None:
            writer = events.EventWriter(
                self.run_dir, self.run, process, format=self.format, flush_seconds=1e9
            )
            self.writers[process] = writer
        writer.record(kind, producer, seq, ts=T0 + round(at_ms * MS), **fields)

    def message(
        self,
        producer: str,
        seq: int,
        sent_ms: float,
        *,
        outcome: str | None = events.SEND_CONFIRMED,
        receipts: tuple[float, ...] = (),
        node: str = "a",
        consumer: str = "consumer-0",
    ) -> None:
        """One message: its send, its outcome 1 ms later, its receipts at the given times."""
        process = f"producer-{producer}"
        self.add(process, events.SEND_INVOKED, sent_ms, producer, seq, address="q", size=10)
        if outcome is not None:
            self.add(process, outcome, sent_ms + 1, producer, seq, node=node, address="q")
        for at in receipts:
            self.add(consumer, events.RECEIVED, at, producer, seq, node=node, address="q")

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
