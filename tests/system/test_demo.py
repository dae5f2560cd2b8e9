"""``make demo`` keeps working: the demo runs end to end at a small size."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.processes import ROOT


@pytest.mark.system
def test_the_demo_moves_everything_intact_through_stalls(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "demo",
            "--bytes",
            str(24 << 20),
            "--frame-size",
            str(64 << 10),
            "--stall-every",
            str(8 << 20),
            "--stall-for",
            "1.0",
            "--dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reader stalls" in result.stdout
    assert "writer paused" in result.stdout
    assert "writer resumes" in result.stdout
    assert "received 24.0 MiB: intact and in order" in result.stdout
