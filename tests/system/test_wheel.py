"""The wheel alone runs a node: built from a copy of the source tree, installed with its
dependencies into a fresh virtual environment (no system site-packages, no checkout on the
path), ``txbridge node`` and ``twistd -n txbridge`` start a node from it, the installed
client sends a message through it and gets it back, and SIGTERM stops it cleanly.

The copy keeps the build from writing into the checkout; the node runs in a folder of its
own, so nothing of the source tree can stand in for what the wheel left out.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

from tests.processes import ROOT
from tests.system.nodes import NodeProcess, node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(600)]

INSTALL_TIMEOUT = 300
"""Seconds pip may take to build the wheel, or to install it with its dependencies."""

CLIENT = """
import sys
from bridge.client.blocking import connect

with connect(sys.argv[1], timeout=30) as client:
    client.send("orders", b"from the wheel")
    message = client.consumer("orders").receive(timeout=30)
    assert message is not None, "nothing received"
    message.ack()
print(message.body.decode())
"""

LEFT_OUT = (
    ".git",
    ".venv",
    "var",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    "dropin.cache",
)


def pip(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"pip {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def venv_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a fresh virtual environment holding the wheel and its dependencies."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LEFT_OUT))
    wheels = base / "wheels"
    pip("wheel", "--no-deps", "--wheel-dir", str(wheels), str(source), cwd=base)
    [wheel] = wheels.glob("txbridge-*.whl")
    venv = base / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        timeout=INSTALL_TIMEOUT,
    )
    pip("--python", str(venv / "bin" / "python"), "install", str(wheel), cwd=base)
    return venv / "bin"


def run_client(bin_dir: Path, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [str(bin_dir / "python"), "-c", CLIENT, url],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("twistd", [False, True], ids=["txbridge-node", "twistd"])
@pytest_twisted.ensureDeferred
async def test_a_node_runs_from_the_installed_wheel(venv_bin, nodes, tmp_path, twistd):
    directory = tmp_path / "node"
    directory.mkdir()
    document: dict[str, Any] = node_document(address=[{"name": "orders"}])
    node = NodeProcess(directory, document, twistd, bin_dir=venv_bin).start()
    nodes.started.append(node)  # killed at the end whatever happens
    await node.wait_started()
    sent = await deferToThread(run_client, venv_bin, node.core_url, directory)
    assert sent.returncode == 0, sent
    assert sent.stdout.strip() == "from the wheel"
    await node.stop(signal.SIGTERM)
    assert node.signal == signal.SIGTERM, node.output
    assert "node a stopped" in node.output
    assert "Traceback" not in node.output, node.output


def test_the_installed_command_says_its_version(venv_bin, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [str(venv_bin / "txbridge"), "--version"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done
    [wheel] = (venv_bin.parent.parent / "wheels").glob("txbridge-*.whl")
    assert done.stdout == f"txbridge {wheel.name.split('-')[1]}\n"
