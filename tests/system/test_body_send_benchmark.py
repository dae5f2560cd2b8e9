"""The body-send benchmark keeps working: ``python -m benchmarks body-send`` sends a body
file both ways (read and send, ``sendfile``), every byte arriving, and saves its JSON. It
checks that the figures are there and sane, not what they are."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.processes import run_benchmark


def _run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return run_benchmark("body-send", list(arguments), 120)


@pytest.mark.system
def test_body_send_measures_both_ways_and_saves_json(tmp_path: Path) -> None:
    output = tmp_path / "body_send.json"
    done = _run(
        "--size",
        "1MiB",
        "--total",
        "8MiB",
        "--chunk",
        "256KiB",
        "--repeat",
        "2",
        "--output",
        str(output),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(output.read_text())
    assert set(report["runs"]) == {"read-and-send", "sendfile"}
    for runs in report["runs"].values():
        assert len(runs) == 2
        for run in runs:
            assert run["bytes"] == 8 * 1024 * 1024  # every byte read by the other end
            assert run["mb_per_s"] > 0 and run["sender_cpu_per_gib"] >= 0
    assert report["sendfile_over_read_sender_cpu"] >= 0
    assert "sendfile / read-and-send, sender CPU:" in done.stdout


@pytest.mark.system
def test_body_send_refuses_a_size_that_is_not_one() -> None:
    refused = _run("--size", "lots")
    assert refused.returncode == 2
    assert "--size" in refused.stderr
