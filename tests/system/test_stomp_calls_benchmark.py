"""The in-process STOMP benchmark keeps working: ``python -m benchmarks stomp-calls``
counts calls and, with ``--time``, measures CPU per message, persistent or not, and saves
its JSON. It checks that the figures are there and sane, not what they are."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.processes import run_benchmark

SMALL = ["--ack", "auto", "--batch", "5", "--rounds", "3"]


def _run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return run_benchmark("stomp-calls", [*SMALL, *arguments], 120)


@pytest.mark.system
@pytest.mark.timeout(180)
@pytest.mark.parametrize("persistent", [True, False])
def test_stomp_calls_counts_calls_or_times_them_and_saves_json(
    tmp_path: Path, persistent: bool
) -> None:
    kind = [] if persistent else ["--non-persistent"]
    counted = _run("--output", str(tmp_path / "calls.json"), *kind)
    assert counted.returncode == 0, counted.stderr
    [figures] = json.loads((tmp_path / "calls.json").read_text())["results"]
    assert figures["python_calls_per_message"] > 10
    timed = _run("--time", "--repeat", "2", "--output", str(tmp_path / "time.json"), *kind)
    assert timed.returncode == 0, timed.stderr
    report = json.loads((tmp_path / "time.json").read_text())
    assert report["timed"] is True and report["persistent"] is persistent
    [figures] = report["results"]
    assert figures["cpu_us_per_message"] > 0
    assert ("persistent SEND" if persistent else "non-persistent SEND") in timed.stdout


@pytest.mark.system
def test_stomp_calls_refuses_top_with_time() -> None:
    refused = _run("--time", "--top", "3")
    assert refused.returncode == 2
    assert "--top counts calls: not with --time" in refused.stderr
