"""The README's "Run a node" works as written: its configuration starts a node, its
script sends and receives through it, and ``txbridge ctl status`` shows it. Only the
ports change: tests never take fixed ones, so the node listens on ports the system picks
and the script and command are pointed at them."""

from __future__ import annotations

import re
import sys
import tomllib

import pytest_twisted
from twisted.internet import utils

from tests.processes import ROOT
from tests.system.nodes import BIN

README = (ROOT / "README.md").read_text()


def block(language: str, containing: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", README, re.DOTALL)
    return next(b for b in blocks if containing in b)


@pytest_twisted.ensureDeferred
async def test_the_readme_node_runs_as_written(nodes, tmp_path):
    document = tomllib.loads(block("toml", "[node]"))
    assert document["acceptor"][0]["url"] == "tcp://127.0.0.1:61616"
    document["acceptor"][0]["url"] = "tcp://127.0.0.1:0"
    document["management"]["url"] = "http://127.0.0.1:0"
    node = await nodes(document).wait_started()

    script = block("python", "first order").replace(
        "127.0.0.1:61616", f"127.0.0.1:{node.ports['core']}"
    )
    (tmp_path / "orders.py").write_text(script)
    out, err, code = await utils.getProcessOutputAndValue(
        sys.executable, ["orders.py"], path=str(tmp_path), env={"PYTHONPATH": str(ROOT)}
    )
    assert code == 0, err
    assert out.decode().splitlines() == ["first order order 1"]

    out, err, code = await utils.getProcessOutputAndValue(
        str(BIN / "txbridge"), ["ctl", "--url", node.management_url, "status"]
    )
    assert code == 0, err
    assert "orders" in out.decode()
