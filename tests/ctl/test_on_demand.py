"""A node loads what only some configurations need where it is used, not at start:
psycopg (about 10 MiB of its memory) only for a store or lease in PostgreSQL, the
management API's HTTP server and Prometheus client (about 4 MiB) only with
``[management]``."""

from __future__ import annotations

import json
import subprocess
import sys

NODE_MODULES = (
    "bridge.ctl.main",
    "bridge.ctl.node",
    "bridge.ctl.service",
    "bridge.ctl.ha",
    "bridge.ctl.quorum",
    "bridge.ctl.replication",
    "bridge.ha.client",
    "bridge.store",
)
PSYCOPG = ("psycopg",)
MANAGEMENT = ("bridge.ctl.management", "twisted.web.server", "prometheus_client")


def _loaded_after(wanted: tuple[str, ...], *modules: str) -> list[str]:
    """Which of ``wanted`` (modules, with their submodules) a fresh interpreter has loaded
    once it imported ``modules``."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"wanted = {wanted!r}\n"
        "print(json.dumps(sorted(\n"
        "    m for m in sys.modules if any(m == w or m.startswith(w + '.') for w in wanted)\n"
        ")))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_the_node_s_modules_do_not_load_psycopg():
    assert _loaded_after(PSYCOPG, *NODE_MODULES) == []


def test_the_postgresql_store_and_lease_do():
    assert "psycopg" in _loaded_after(PSYCOPG, "bridge.store.postgresql")
    assert "psycopg" in _loaded_after(PSYCOPG, "bridge.ha.lease")


def test_the_node_s_modules_do_not_load_the_management_api():
    assert _loaded_after(MANAGEMENT, *NODE_MODULES) == []


def test_the_management_api_does():
    assert set(MANAGEMENT) <= set(_loaded_after(MANAGEMENT, "bridge.ctl.management"))
