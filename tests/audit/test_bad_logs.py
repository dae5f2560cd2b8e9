"""Bad and partial logs: a clear error naming the file, or skipped lines counted and
reported, never a silent wrong answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bridge import events
from bridge.audit.pipeline import audit
from bridge.audit.read import AuditError, find_files
from tests.audit.conftest import require
from tests.audit.logs import RunLog
from tests.processes import ROOT

pa = require("pyarrow")
pq = require("pyarrow.parquet")

BIN = Path(sys.executable).parent


def _small_run(run_dir: Path, format: str = "parquet", run: str = "r1") -> Path:
    """Three messages of producer p0, all received once; returns the consumer's folder."""
    log = RunLog(run_dir, run=run, format=format)
    for seq in range(3):
        log.message("p0", seq, seq * 10, receipts=(seq * 10 + 5,))
    log.close()
    return events.partition_dir(run_dir, run, "consumer-0")


def _only_file(folder: Path) -> Path:
    (path,) = folder.iterdir()
    return path


def test_a_folder_without_event_logs_is_named(tmp_path: Path) -> None:
    with pytest.raises(AuditError, match=r"no such run folder"):
        find_files(tmp_path / "absent")
    with pytest.raises(AuditError, match=rf"{tmp_path / 'events'}: no such folder"):
        find_files(tmp_path)
    (tmp_path / "events").mkdir()
    with pytest.raises(AuditError, match=r"no event log files"):
        find_files(tmp_path)


def test_a_stray_file_is_named(tmp_path: Path) -> None:
    consumer = _small_run(tmp_path)
    (consumer / "notes.txt").write_text("hello")
    with pytest.raises(AuditError, match=r"notes\.txt: not an event log part"):
        find_files(tmp_path)


def test_a_cut_short_parquet_file_is_named(tmp_path: Path) -> None:
    part = _only_file(_small_run(tmp_path))
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])
    with pytest.raises(AuditError, match=rf"{part}: not a readable Parquet file"):
        find_files(tmp_path)


def test_a_parquet_file_of_another_schema_is_named(tmp_path: Path) -> None:
    part = _only_file(_small_run(tmp_path))
    table = pq.read_table(part)
    pq.write_table(table.set_column(1, "ts", pa.array(["soon"] * len(table))), part)
    with pytest.raises(AuditError, match=rf"{part}: wrong schema: field 'ts' is string"):
        find_files(tmp_path)
    pq.write_table(table.drop_columns(["seq"]), part)
    with pytest.raises(AuditError, match=r"wrong schema: no field 'seq'"):
        find_files(tmp_path)


def test_json_lines_that_do_not_parse_are_skipped_counted_and_reported(
    spark: Any, tmp_path: Path
) -> None:
    part = _only_file(_small_run(tmp_path, "jsonl"))
    lines = part.read_text().splitlines()
    assert len(lines) == 3
    lines[1] = '{"kind":"received","ts":"not a number","producer":"p0","seq":1}'
    part.write_text("\n".join(lines) + "\n" + lines[2][: len(lines[2]) // 2])
    report = audit(spark, tmp_path)
    name = str(part.relative_to(tmp_path))
    assert report["skipped"] == {"total": 2, "files": {name: 2}}
    # The receipt of seq 1 was unreadable: the audit says it is lost, and why it may be.
    assert report["delivery"]["lost"] == 1
    assert report["delivery"]["examples"]["lost"] == [{"producer": "p0", "seq": 1}]
    assert "Skipped lines" in (tmp_path / "report" / "index.html").read_text()


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"kind":"received","producer":"p0","seq":9}', "lack a required field"),
        ('{"kind":"teleported","ts":5}', "unknown kind 'teleported'"),
    ],
)
def test_events_of_a_wrong_schema_are_an_error_naming_the_file(
    spark: Any, tmp_path: Path, line: str, problem: str
) -> None:
    part = _only_file(_small_run(tmp_path, "jsonl"))
    with part.open("a") as file:
        file.write(line + "\n")
    with pytest.raises(AuditError, match=rf"{part.relative_to(tmp_path)}: 1 events .*{problem}"):
        audit(spark, tmp_path)


def test_a_folder_of_several_runs_needs_one_picked(spark: Any, tmp_path: Path) -> None:
    _small_run(tmp_path, run="r1")
    log = RunLog(tmp_path, run="r2")
    log.message("p0", 0, 0)
    log.close()
    with pytest.raises(AuditError, match=r"holds the runs r1, r2: pick one with --run"):
        audit(spark, tmp_path)
    assert audit(spark, tmp_path, run="r2")["delivery"]["lost"] == 1
    with pytest.raises(AuditError, match=r"no event log files of run 'r3'"):
        find_files(tmp_path, "r3")


def _txbridge(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [str(BIN / "txbridge"), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )


def test_txbridge_audit_names_a_bad_folder_without_starting_spark(tmp_path: Path) -> None:
    result = _txbridge("audit", str(tmp_path))
    assert result.returncode == 1
    assert f"txbridge audit: {tmp_path / 'events'}: no such folder" in result.stderr


@pytest.mark.timeout(240)
def test_txbridge_audit_writes_the_report_and_prints_the_headline(
    spark: Any, tmp_path: Path
) -> None:
    """The command line as a user runs it: its own Spark (local[2]), its own process."""
    _small_run(tmp_path / "run")
    out = tmp_path / "out"
    result = _txbridge("audit", str(tmp_path / "run"), "--master", "local[2]", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "lost" in result.stdout
    assert f"report: {out / 'index.html'}" in result.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["delivery"]["attempted"] == report["delivery"]["received"] == 3
    assert report["audit"]["master"] == "local[2]"
