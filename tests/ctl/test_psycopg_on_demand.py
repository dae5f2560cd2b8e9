"""A node that keeps neither its store nor its lease in PostgreSQL never loads psycopg
(about 10 MiB of its memory): the modules that need it are imported where they are used."""

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


def _psycopg_after(*modules: str) -> list[str]:
    """The psycopg modules loaded by a fresh interpreter once it imported ``modules``."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'psycopg')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_the_node_s_modules_do_not_load_psycopg():
    assert _psycopg_after(*NODE_MODULES) == []


def test_the_postgresql_store_and_lease_do():
    assert "psycopg" in _psycopg_after("bridge.store.postgresql")
    assert "psycopg" in _psycopg_after("bridge.ha.lease")
