"""A node that cannot start where it is (its data directory cannot be made or written, an
existing store is on a read-only file system, a security file is missing) says so in one
line naming the key, the path and the problem, exits with status 1 and creates nothing.

The read-only cases use a tmpfs mounted read-only: root ignores permission bits, so only a
read-only file system is an honest "cannot write" for every user.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import tomli_w

from tests.system.nodes import BIN, node_document

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]


def run(directory: Path, *, twistd: bool = False) -> subprocess.CompletedProcess[str]:
    if twistd:
        argv = [str(BIN / "twistd"), "-n", "--pidfile=", "txbridge", "--config", "node.toml"]
    else:
        argv = [str(BIN / "txbridge"), "node", "--config", "node.toml"]
    return subprocess.run(
        argv, cwd=directory, capture_output=True, text=True, timeout=60, check=False
    )


def write_config(directory: Path, document: dict[str, Any]) -> None:
    (directory / "node.toml").write_text(tomli_w.dumps(document))


def the_one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    [line] = result.stderr.splitlines()
    assert line.startswith("txbridge node: cannot start: node.toml: "), line
    return line


def tree(directory: Path) -> set[str]:
    return {str(path.relative_to(directory)) for path in directory.rglob("*")}


@pytest.mark.parametrize("twistd", [False, True], ids=["txbridge-node", "twistd"])
def test_a_data_dir_under_a_regular_file(tmp_path, twistd):
    (tmp_path / "afile").write_text("not a directory\n")
    document = node_document()
    document["node"]["data-dir"] = "afile/data"
    write_config(tmp_path, document)
    result = run(tmp_path, twistd=twistd)
    if twistd:
        # twistd logs it, then ends (it used to log it and then run on for ever).
        assert result.returncode == 1, result
        assert "node.data-dir: cannot create afile/data: afile is not a directory" in (
            result.stdout
        ), result
    else:
        line = the_one_line(result)
        assert line.endswith("node.data-dir: cannot create afile/data: afile is not a directory")
    assert tree(tmp_path) == {"node.toml", "afile"}
    assert (tmp_path / "afile").read_text() == "not a directory\n"


def test_a_missing_users_file_is_named_by_its_key(tmp_path):
    document = node_document(security={"enabled": True, "users-file": "users.toml"})
    write_config(tmp_path, document)
    line = the_one_line(run(tmp_path))
    assert line.endswith("security.users-file: users.toml does not exist"), line
    assert tree(tmp_path) == {"node.toml"}  # no data directory made first


class Mount:
    """A small tmpfs, writable until :meth:`make_read_only`; unmounted at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def make_read_only(self) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True, timeout=30)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Mount]:
    path = tmp_path / "fs"
    path.mkdir()
    why = None
    if os.geteuid() != 0:
        why = "mounting a read-only file system needs root"
    else:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if mounted.returncode != 0:
            why = f"cannot mount a tmpfs: {mounted.stderr.strip()}"
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield Mount(path)
    finally:
        subprocess.run(["umount", str(path)], check=True, timeout=30)


def test_a_data_dir_on_a_read_only_file_system(tmp_path, tmpfs):
    tmpfs.make_read_only()
    document = node_document()
    document["node"]["data-dir"] = "fs/data"
    write_config(tmp_path, document)
    line = the_one_line(run(tmp_path))
    assert line.endswith("node.data-dir: cannot create fs/data: fs is on a read-only file system")
    assert tree(tmpfs.path) == set()


@pytest_twisted.ensureDeferred
async def test_an_existing_store_on_a_read_only_file_system_is_named(tmp_path, tmpfs, nodes):
    document = node_document()
    document["node"]["data-dir"] = str(tmpfs.path / "data")
    node = await nodes(document).wait_started()
    await node.stop(signal.SIGTERM)
    assert node.signal == signal.SIGTERM, node.output
    tmpfs.make_read_only()
    before = tree(tmpfs.path)
    assert "data/messages.sqlite" in before
    line = the_one_line(run(node.directory))
    assert line.endswith(f"node.data-dir: {tmpfs.path / 'data'} is on a read-only file system"), (
        line
    )
    assert tree(tmpfs.path) == before
