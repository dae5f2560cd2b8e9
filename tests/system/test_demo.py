"""``make demo`` keeps working: the demo runs end to end at a small size; a failing peer or
a SIGTERM ends it at once, non-zero, leaving no peer process behind."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.processes import ROOT


def _demo(tmp_path: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks", "demo", "--dir", str(tmp_path), *options]


def _peers_left(tmp_path: Path) -> list[str]:
    """Peer processes of this demo still running. They are the demo's children, so the
    test's own leak check (children of the test process) would not see them once the
    demo is gone: they are found by the demo's folder in their command line."""
    left = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if "benchmarks.peers" in cmdline and str(tmp_path) in cmdline:
            left.append(f"{process.pid}: {cmdline}")
    return left


@pytest.mark.system
def test_the_demo_moves_everything_intact_through_stalls(tmp_path):
    result = subprocess.run(
        _demo(
            tmp_path,
            "--bytes",
            str(24 << 20),
            "--frame-size",
            str(64 << 10),
            "--stall-every",
            str(8 << 20),
            "--stall-for",
            "1.0",
        ),
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
    assert _peers_left(tmp_path) == []


@pytest.mark.system
def test_a_failing_peer_ends_the_demo_with_its_error_and_no_peer_left(tmp_path):
    # Frames must hold at least their 8-byte sequence number: the writer refuses to start.
    result = subprocess.run(
        _demo(tmp_path, "--frame-size", "4"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "demo failed: the writer failed: peer exited before 'done'" in result.stderr
    assert "frame size must be at least 8" in result.stderr
    assert _peers_left(tmp_path) == []


@pytest.mark.system
def test_sigterm_stops_the_demo_and_its_peers(tmp_path):
    # Big enough to be still running when the signal comes.
    demo = subprocess.Popen(
        _demo(tmp_path, "--bytes", str(64 << 30), "--stall-every", str(1 << 20)),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            if "the reader listens on port" in line:
                break
        else:
            pytest.fail(f"the demo ended before its reader listened: {demo.communicate()}")
        assert _peers_left(tmp_path) != []
        demo.send_signal(signal.SIGTERM)
        _, stderr = demo.communicate(timeout=30)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()
    assert demo.returncode == 128 + signal.SIGTERM, stderr
    assert _peers_left(tmp_path) == []
