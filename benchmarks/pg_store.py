"""The PostgreSQL store case of the node benchmark: a schema of its own per run, and what
the database spends per message.

``bench_store(server)`` creates a schema on ``server`` (dropped afterwards) and gives the
``[store]`` table for the node and a ``Costs`` that, started and finished around the
measured part, reads the node's server process CPU (by its ``application_name``) and the
write-ahead log the run produced.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/test"


def _cpu(pid: int) -> float:
    """CPU seconds of the server process ``pid``, to the nanosecond: ``schedstat``'s time on
    CPU (a backend has one thread). ``stat``'s clock ticks (10 ms) would read a short run's
    few milliseconds as 0 or 10."""
    with open(f"/proc/{pid}/schedstat") as schedstat:
        return int(schedstat.read().split()[0]) / 1e9


@dataclass
class Costs:
    """The server's work for the node's connection between ``start`` and ``finish``."""

    server: str
    application: str
    _backend: int = 0
    _cpu: float = 0.0
    _lsn: str = ""
    figures: dict[str, Any] = field(default_factory=dict)

    def start(self) -> None:
        with psycopg.connect(self.server, autocommit=True) as admin:
            row = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                (self.application,),
            ).fetchone()
            if row is None:
                raise RuntimeError(f"no server process for {self.application}")
            self._backend = int(row[0])
            lsn = admin.execute("SELECT pg_current_wal_lsn()").fetchone()
            self._lsn = str(lsn[0]) if lsn is not None else "0/0"
        self._cpu = _cpu(self._backend)

    def finish(self) -> None:
        cpu = _cpu(self._backend) - self._cpu
        with psycopg.connect(self.server, autocommit=True) as admin:
            row = admin.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (self._lsn,)
            ).fetchone()
            settings: dict[str, str] = dict(
                admin.execute(
                    "SELECT name, setting FROM pg_settings WHERE name IN"
                    " ('fsync', 'synchronous_commit', 'wal_sync_method', 'shared_buffers')"
                ).fetchall()
            )
        self.figures = {
            "server_cpu_seconds": cpu,
            "wal_bytes": int(row[0]) if row is not None else 0,
            "server_settings": settings,
        }


@contextmanager
def bench_schema(server: str) -> Iterator[tuple[str, str]]:
    """A new schema on ``server``, dropped afterwards: its name, and the server's URL with
    it as the search path (and as the application name)."""
    name = f"txbridge_bench_{uuid.uuid4().hex[:12]}"
    schema = sql.Identifier(name)
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
    try:
        separator = "&" if "?" in server else "?"
        options = quote(f"-csearch_path={name}")
        yield name, f"{server}{separator}options={options}&application_name={name}"
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))


@contextmanager
def bench_store(server: str) -> Iterator[tuple[str, Costs]]:
    """A new schema on ``server``: the node's ``[store]`` table text, and its ``Costs``."""
    with bench_schema(server) as (name, url):
        table = f'\n[store]\ntype = "postgresql"\nurl = "{url}"\n'
        yield table, Costs(server, name)
