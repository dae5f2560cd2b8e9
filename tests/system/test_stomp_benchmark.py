"""The STOMP benchmark keeps working: ``python -m benchmarks stomp`` at a tiny count, with
a real node and stomp.py producer and consumer processes, persistent and non-persistent.
It checks the figures are sane (everything sent delivered once, in order), not how fast."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.processes import ROOT

COUNT = 300


@pytest.mark.system
@pytest.mark.timeout(180)
def test_the_stomp_benchmark_delivers_every_message_in_both_modes(tmp_path: Path) -> None:
    output = tmp_path / "stomp.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "stomp",
            "--count",
            str(COUNT),
            "--repeat",
            "1",
            "--ack-every",
            "50",
            "--output",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(output.read_text())
    assert figures["count"] == COUNT
    assert set(figures["cases"]) == {"persistent", "non-persistent"}
    for mode, case in figures["cases"].items():
        assert case["msgs_per_s"] > 0 and case["sends_per_s"] > 0
        (run,) = case["runs"]
        assert run["mode"] == mode
        assert run["sent"] == run["delivered"] == COUNT
        assert run["out_of_order"] == run["duplicates"] == run["redelivered"] == 0
        assert run["node_exit"] is not None  # stopped by SIGTERM, not left running
        for pid in run["pids"].values():
            assert not psutil.pid_exists(pid) or (
                psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            ), f"process {pid} of the {mode} run is still running"
