"""``txbridge bench node`` end to end, at a size that takes seconds: a real node process,
traced producer and consumer processes writing event logs, the audit on Spark, the
headline printed, and nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bridge import events
from tests.audit.conftest import require_spark
from tests.processes import ROOT

BIN = Path(sys.executable).parent
MESSAGES = 300


def _running_in(folder: Path) -> list[str]:
    found = []
    for process in psutil.process_iter(["pid", "cwd", "cmdline"]):
        cwd = process.info["cwd"] or ""
        cmdline = " ".join(process.info["cmdline"] or [])
        if cwd.startswith(str(folder)) or str(folder) in cmdline:
            found.append(f"{process.info['pid']}: {cmdline}")
    return found


@pytest.mark.system
@pytest.mark.timeout(300)
def test_the_node_scenario_runs_writes_event_logs_and_audits_them(tmp_path: Path) -> None:
    require_spark()
    out = tmp_path / "run"
    result = subprocess.run(
        [
            str(BIN / "txbridge"), "bench", "node", "--out", str(out),
            "--messages", str(MESSAGES), "--size", "100", "--ack-every", "50",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = dict(line.split("  ", 1) for line in result.stdout.splitlines() if "  " in line)
    assert lines["lost"].strip() == "0"
    assert lines["duplicated"].strip() == "0"
    assert f"report: {out / 'report' / 'index.html'}" in result.stdout

    (run,) = [p.name for p in (out / events.EVENTS_DIR).iterdir()]
    processes = {p.name for p in (out / events.EVENTS_DIR / run).iterdir()}
    assert processes == {"process=producer-0", "process=consumer-0", "process=node"}
    report = json.loads((out / "report" / "report.json").read_text())
    delivery = report["delivery"]
    assert delivery["attempted"] == delivery["confirmed"] == delivery["received"] == MESSAGES
    assert delivery["lost"] == delivery["unexpected"] == delivery["order_violations"] == 0
    assert delivery["per_node"] == {"bench": {"confirmed": MESSAGES, "lost": 0}}
    assert report["latency"]["overall"]["count"] == MESSAGES
    assert 0 < report["latency"]["overall"]["p50"] <= report["latency"]["overall"]["max"]
    assert sum(row["received"] for row in report["throughput"]["per_second"]) == MESSAGES
    assert set(report["rss"]["per_process"]) == {"producer-0", "consumer-0", "node"}
    assert report["rss"]["per_process"]["node"]["peak_bytes"] > 10 * 1024 * 1024
    assert report["per_kind"][events.ACKED] == MESSAGES // 50
    assert (out / "report" / "index.html").is_file()
    assert _running_in(tmp_path) == []
