"""A node as a process: ``txbridge node`` and ``twistd -n txbridge`` start it from a file,
SIGTERM stops it gracefully, and a bad file stops it before anything starts, naming the
file, the key and what was expected."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import tomli_w
from twisted.internet import defer
from twisted.internet.threads import deferToThread

from tests.system.nodes import BIN, node_document


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


async def get_json(url: str) -> Any:
    return await deferToThread(_get_json, url)


@pytest.mark.parametrize("twistd", [False, True], ids=["txbridge-node", "twistd"])
@pytest_twisted.ensureDeferred
async def test_a_node_starts_serves_status_and_stops_on_sigterm(nodes, twistd):
    node = await nodes(node_document(), twistd=twistd).wait_started()
    status = await get_json(node.management_url + "/status")
    assert status["node"]["name"] == "a"
    assert [q["name"] for q in status["queues"]] == []
    await node.stop(signal.SIGTERM)
    assert node.signal == signal.SIGTERM, node.output
    assert "node a stopped" in node.output
    assert "Traceback" not in node.output


@pytest_twisted.ensureDeferred
async def test_a_wait_that_times_out_names_the_line_and_shows_the_output(nodes):
    """A system test's wait for a line the node never logs fails naming the line, with
    the node's output, so that a failure in CI shows what the node did instead."""
    node = await nodes(node_document()).wait_started()
    with pytest.raises(defer.TimeoutError) as raised:
        await node.wait_for(r"node a: never says this", 0.2)
    assert "node a: never says this" in str(raised.value)
    assert "started: core on 127.0.0.1:" in str(raised.value), raised.value


BAD = [
    ("not toml", "[node\nname = 'a'", "is not valid TOML"),
    ("unknown key", {"node": {"name": "a", "data-dir": "d", "colour": 1}}, "node.colour"),
    (
        "bad size",
        {
            "node": {"name": "a", "data-dir": "d"},
            "address": [{"name": "o", "max-size-bytes": "lots"}],
        },
        "address[0].max-size-bytes",
    ),
    (
        "bad url",
        {
            "node": {"name": "a", "data-dir": "d"},
            "acceptor": [{"name": "c", "url": "udp://x:1", "protocols": ["core"]}],
        },
        "acceptor[0].url",
    ),
    (
        "bad routing",
        {"node": {"name": "a", "data-dir": "d"}, "address": [{"name": "o", "routing": "x"}]},
        "address[0].routing",
    ),
    (
        "bad policy",
        {
            "node": {"name": "a", "data-dir": "d"},
            "address": [{"name": "o", "address-full-policy": "SPILL"}],
        },
        "address[0].address-full-policy",
    ),
    ("missing node", {"acceptor": []}, "node"),
]


def write(path: Path, document: str | dict[str, Any]) -> None:
    path.write_text(document if isinstance(document, str) else tomli_w.dumps(document))


@pytest.mark.parametrize(("kind", "document", "key"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_file_stops_txbridge_node_naming_file_and_key(tmp_path, kind, document, key):
    write(tmp_path / "node.toml", document)
    result = subprocess.run(
        [str(BIN / "txbridge"), "node", "--config", "node.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result
    [line] = result.stderr.splitlines()
    assert line.startswith("txbridge node: node.toml")
    assert key in line
    assert list(tmp_path.iterdir()) == [tmp_path / "node.toml"]  # nothing started


def test_a_bad_file_stops_twistd_too(tmp_path):
    write(tmp_path / "node.toml", BAD[2][1])
    result = subprocess.run(
        [str(BIN / "twistd"), "-n", "--pidfile=", "txbridge", "--config", "node.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "address[0].max-size-bytes" in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "node.toml"]


def test_a_missing_file_is_named(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bridge.ctl.main", "node", "--config", "absent.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "absent.toml" in result.stderr and "cannot be read" in result.stderr


@pytest_twisted.ensureDeferred
async def test_a_busy_port_ends_the_process_with_status_1(nodes):
    first = await nodes(node_document(), name="first").wait_started()
    busy = first.ports["core"]
    document = node_document(
        acceptor=[{"name": "main", "url": f"tcp://127.0.0.1:{busy}", "protocols": ["core"]}]
    )
    second = nodes(document, name="second")
    with pytest.raises(RuntimeError, match="ended before starting"):
        await second.wait_started()
    await second.ended
    assert second.exit_code == 1
    assert f"acceptor 'main' at tcp://127.0.0.1:{busy}" in second.output
