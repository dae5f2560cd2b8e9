"""A fresh PostgreSQL schema per test on the machine's server, dropped afterwards.

The server is ``TXBRIDGE_TEST_POSTGRESQL`` (default: 127.0.0.1:5432, database ``test``,
trust auth). Where it cannot be reached a test that needs it is skipped, saying why, unless
the environment variable ``CI`` is set: then it fails.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

SERVER = os.environ.get("TXBRIDGE_TEST_POSTGRESQL", "postgresql://postgres@127.0.0.1:5432/test")


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(SERVER, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        reason = f"PostgreSQL at {SERVER} cannot be reached: {error}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def schema_url(schema: str) -> str:
    """The server's URL with ``schema`` as the connection's search path."""
    options = quote(f"-csearch_path={schema}")
    separator = "&" if "?" in SERVER else "?"
    return f"{SERVER}{separator}options={options}"


def execute(
    schema: str, statement: str, params: tuple[object, ...] = ()
) -> list[tuple[object, ...]]:
    """Run one statement in ``schema`` and commit it: its rows, if it returns any."""
    with psycopg.connect(schema_url(schema), autocommit=True) as connection:
        cursor = connection.execute(statement, params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A new empty schema's name; it is dropped, with all it holds, after the test."""
    yield from _fresh_schema()


@pytest.fixture
def pg_other_schema() -> Iterator[str]:
    """A second schema, as ``pg_schema``, for a test that needs two."""
    yield from _fresh_schema()


def _fresh_schema() -> Iterator[str]:
    name = f"txbridge_test_{uuid.uuid4().hex[:12]}"
    with _admin() as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        _drop_schema(name)


def _drop_schema(name: str) -> None:
    """Drop ``name``. A node process of the test may still run on it (fixtures end in
    the reverse of the order a test names them), and the drop, locking table after table,
    can then deadlock with one of the node's transactions (the server aborts one of the
    two), or wait on a node the test left paused mid-transaction. So each try waits at most
    ``lock_timeout``; after one that timed out, the sessions that hold locks in the schema
    are ended (the test is over), and the drop is tried again, a bounded number of times."""
    drop = sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name))
    for attempt in range(50):
        try:
            with _admin() as admin:
                admin.execute("SET lock_timeout = '2s'")
                admin.execute(drop)
            return
        except psycopg.errors.LockNotAvailable:
            if attempt == 49:
                raise
            _end_holders(name)
        except psycopg.errors.DeadlockDetected:
            if attempt == 49:
                raise
            time.sleep(0.1)


def _end_holders(schema: str) -> None:
    """End the other sessions that hold a lock on a table of ``schema``."""
    with _admin() as admin:
        admin.execute(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l"
            " JOIN pg_class c ON c.oid = l.relation"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND l.pid <> pg_backend_pid()",
            (schema,),
        )


@pytest.fixture
def pg_reader_role(pg_schema: str) -> Iterator[str]:
    """A role that may log in and use ``pg_schema``, but not create tables in it."""
    name = f"txbridge_test_{uuid.uuid4().hex[:12]}"
    role, schema = sql.Identifier(name), sql.Identifier(pg_schema)
    with _admin() as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
        admin.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, role))
    try:
        yield name
    finally:
        with _admin() as admin:
            admin.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM {}").format(schema, role))
            admin.execute(sql.SQL("DROP ROLE {}").format(role))
