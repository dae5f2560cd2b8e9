"""``scripts/bootstrap`` installs venv support with sudo when not root, and says what to
install when it cannot.

apt-get, sudo, id and the interpreter are stand-ins on PATH (shell scripts that record
their arguments): the real ones would install system packages, which a test must not do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.processes import ROOT

SCRIPT = ROOT / "scripts" / "bootstrap"

# A Python without ensurepip; "-m venv DIR" makes DIR/bin/python.
PYTHON = """#!/bin/sh
case "$*" in *ensurepip*) exit 1 ;; esac
if [ "$1" = -m ] && [ "$2" = venv ]; then
    mkdir -p "$3/bin" && : > "$3/bin/python" && chmod +x "$3/bin/python"
fi
"""


def _stub(directory: Path, name: str, text: str) -> None:
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)


def _run(tmp_path: Path, *, uid: int, sudo: bool) -> tuple[subprocess.CompletedProcess[str], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    log.touch()
    for tool in ("mkdir", "chmod"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    _stub(bin_dir, "python", PYTHON)
    _stub(bin_dir, "id", f'#!/bin/sh\n[ "$1" = -u ] && echo {uid}\n')
    _stub(bin_dir, "apt-get", f'#!/bin/sh\necho "apt-get $*" >> {log}\n')
    if sudo:
        _stub(bin_dir, "sudo", f'#!/bin/sh\necho "sudo $*" >> {log}\nexec "$@"\n')
    result = subprocess.run(
        ["/bin/sh", str(SCRIPT), str(bin_dir / "python"), str(tmp_path / "venv")],
        env={**os.environ, "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result, log.read_text()


@pytest.mark.system
def test_as_a_user_with_sudo_apt_get_runs_through_sudo(tmp_path):
    result, log = _run(tmp_path, uid=1000, sudo=True)
    assert result.returncode == 0, result.stderr
    assert log.splitlines() == [
        "sudo apt-get update -q",
        "apt-get update -q",
        "sudo apt-get install -y -q python3-venv",
        "apt-get install -y -q python3-venv",
    ]
    assert (tmp_path / "venv" / "bin" / "python").exists()


@pytest.mark.system
def test_as_a_user_without_sudo_it_says_what_to_install(tmp_path):
    result, log = _run(tmp_path, uid=1000, sudo=False)
    assert result.returncode == 1
    assert log == ""
    assert "needs root" in result.stderr
    assert "apt-get install -y python3-venv" in result.stderr
    assert not (tmp_path / "venv").exists()


@pytest.mark.system
def test_as_root_apt_get_runs_directly(tmp_path):
    result, log = _run(tmp_path, uid=0, sudo=True)
    assert result.returncode == 0, result.stderr
    assert log.splitlines() == ["apt-get update -q", "apt-get install -y -q python3-venv"]
