"""The README's example works as written: its shell command, then its Python program."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import ROOT

README = (ROOT / "README.md").read_text()


def _block(language: str, containing: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", README, re.DOTALL)
    return next(block for block in blocks if containing in block)


@pytest.mark.system
def test_the_example_runs_as_written(tmp_path: Path):
    command = shlex.split(_block("sh", "txbridge certs").strip())
    assert command[0] == ".venv/bin/txbridge"
    txbridge = Path(sys.executable).parent / "txbridge"
    subprocess.run([str(txbridge), *command[1:]], cwd=tmp_path, check=True, capture_output=True)
    (tmp_path / "example.py").write_text(_block("python", "task.react"))
    result = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "hello over mutual TLS",
        "client certificate: CN=alice,O=txbridge development",
    ]
