"""The large-message benchmark keeps working: ``python -m benchmarks large`` at a tiny
size, as a real process with a real node, producer and consumer, durable and non-durable.
It checks that the figures are sane (every message confirmed and delivered once, in order,
whole), not how fast: speed is measured by benchmark runs, never by tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.processes import ROOT

TOTAL = 2 * 1024 * 1024
SIZE = 512 * 1024


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.system
@pytest.mark.timeout(240)
def test_the_large_benchmark_delivers_every_message_whole_in_both_modes(tmp_path: Path) -> None:
    output = tmp_path / "large.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "large",
            "--total",
            str(TOTAL),
            "--size",
            "512KiB",
            "--verify",
            "--seconds",
            "120",
            "--output",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "durable" in result.stdout
    assert "non-durable" in result.stdout
    figures = json.loads(output.read_text())
    assert (figures["total"], figures["size"], figures["count"]) == (TOTAL, SIZE, 4)
    assert figures["raw"]["bytes"] >= TOTAL and figures["raw"]["mb_per_s"] > 0
    assert figures["disk"]["bytes"] == TOTAL and figures["disk"]["mb_per_s"] > 0
    assert "synced disk" in result.stdout
    assert set(figures["cases"]) == {"durable", "non-durable"}
    assert figures["cases"]["durable"]["ratio_ours_to_disk"] > 0
    assert "ratio_ours_to_disk" not in figures["cases"]["non-durable"]
    for mode, case in figures["cases"].items():
        assert case["mode"] == mode
        assert case["sent"] == case["confirmed"] == case["delivered"] == 4
        assert case["bytes"] == TOTAL
        assert case["out_of_order"] == case["wrong_size"] == case["refused"] == 0
        assert case["crc_ok"]
        assert case["mb_per_s"] > 0 and case["ratio_ours_to_raw"] > 0
        assert 0 < case["node_idle_rss"] <= case["node_peak_rss"]
        assert case["producer_peak_rss"] > 0 and case["consumer_peak_rss"] > 0
        assert case["node_exit"] is not None  # stopped by SIGTERM, not left running
        for pid in case["pids"].values():
            assert not _alive(pid), f"process {pid} of the {mode} run is still running"
