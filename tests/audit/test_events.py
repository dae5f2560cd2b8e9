"""The event-log writer: batches, part files, both formats, and what importing costs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bridge import events
from tests.audit.conftest import require

pq = require("pyarrow.parquet")


def _ticks(start: int = 0, step: int = 1) -> object:
    now = [start - step]

    def clock() -> int:
        now[0] += step
        return now[0]

    return clock


def test_events_are_buffered_and_written_a_batch_at_a_time(tmp_path: Path) -> None:
    writer = events.EventWriter(tmp_path, "r1", "producer-0", batch_size=3, clock=_ticks())
    folder = tmp_path / "events" / "run=r1" / "process=producer-0"
    writer.record(events.SEND_INVOKED, "p", 0, address="q", size=5)
    writer.record(events.SEND_CONFIRMED, "p", 0, node="a")
    assert writer.buffered == 2
    assert not list(folder.iterdir())
    writer.record(events.SEND_INVOKED, "p", 1)
    assert writer.buffered == 0
    writer.record(events.FLOW_PAUSED, detail="connection")
    writer.close()
    parts = sorted(folder.iterdir())
    assert [p.suffix for p in parts] == [".parquet", ".parquet"]
    rows = [row for part in parts for row in pq.read_table(part).to_pylist()]
    assert rows[0] == {
        "kind": "send-invoked",
        "ts": 0,
        "producer": "p",
        "seq": 0,
        "message": None,
        "node": None,
        "address": "q",
        "size": 5,
        "detail": None,
    }
    assert [row["ts"] for row in rows] == [0, 1, 2, 3]
    assert rows[3]["detail"] == "connection"
    with pytest.raises(ValueError, match="closed"):
        writer.flush()


def test_a_batch_is_written_once_it_is_old_enough(tmp_path: Path) -> None:
    clock = _ticks(step=600_000_000)  # 0.6 s per event
    writer = events.EventWriter(tmp_path, "r1", "c", format="jsonl", flush_seconds=1.0, clock=clock)
    for seq in range(3):
        writer.record(events.RECEIVED, "p", seq)
    assert writer.buffered == 0  # the third event came 1.2 s after the first
    (part,) = (tmp_path / "events" / "run=r1" / "process=c").iterdir()
    assert [json.loads(line) for line in part.read_text().splitlines()] == [
        {"kind": "received", "ts": 0, "producer": "p", "seq": 0},
        {"kind": "received", "ts": 600_000_000, "producer": "p", "seq": 1},
        {"kind": "received", "ts": 1_200_000_000, "producer": "p", "seq": 2},
    ]


def test_names_and_formats_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"process name 'a/b'"):
        events.EventWriter(tmp_path, "r1", "a/b")
    with pytest.raises(ValueError, match=r"format 'csv'"):
        events.EventWriter(tmp_path, "r1", "p", format="csv")


def test_importing_the_client_the_schema_or_the_audit_does_not_import_pyspark() -> None:
    code = (
        "import sys, bridge.events, bridge.client.api, bridge.audit, bridge.audit.cli, "
        "bridge.ctl.main; print('pyspark' in sys.modules, 'twisted' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "True"]
