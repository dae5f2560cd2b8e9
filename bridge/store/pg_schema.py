"""The PostgreSQL schema of the message store, its version, and connecting with it.

The same tables as the SQLite store (``bridge.store.schema`` says what each holds), in the
connection's current schema (the first of its ``search_path``: a URL's
``options=-csearch_path=NAME`` puts a store in a schema of its own). ``queues.seq`` keeps
their creation order; ``paged_messages`` is unlogged, as paged messages do not outlive the
node. Creating or migrating the schema holds an advisory lock, so that two nodes starting on
one database at once do not both create it.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bridge.ha.lease import TABLES as LEASE_TABLES
from bridge.store.errors import SchemaTooNew, StoreError

SCHEMA_VERSION = 2

PgCursor = psycopg.Cursor[tuple[Any, ...]]
"""A cursor of the store's connection, its rows as tuples: what the writer's operations
and the large bodies run their statements on."""

_LARGE_BODIES = (
    "CREATE TABLE large_bodies ("
    " message_id BIGINT NOT NULL, seq INTEGER NOT NULL, data BYTEA NOT NULL,"
    " PRIMARY KEY (message_id, seq))",
    # Bodies are mostly incompressible: stored out of line as they are, not compressed.
    "ALTER TABLE large_bodies ALTER COLUMN data SET STORAGE EXTERNAL",
)
"""Large message bodies in chunks (``bridge.store.pg_bodies``); version 1 kept them only
as files in the node's data directory."""

MIGRATIONS = {1: _LARGE_BODIES}
"""What brings a store from each version to the next."""

SCHEMA = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    "CREATE TABLE store_state (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    "CREATE TABLE queues ("
    " seq BIGSERIAL PRIMARY KEY,"
    " name TEXT NOT NULL UNIQUE,"
    " address TEXT NOT NULL,"
    " routing TEXT NOT NULL CHECK (routing IN ('anycast', 'multicast')),"
    " filter TEXT)",
    "CREATE TABLE messages ("
    " id BIGINT PRIMARY KEY, refs INTEGER NOT NULL, data BYTEA NOT NULL, large BIGINT)",
    "CREATE UNLOGGED TABLE paged_messages ("
    " id BIGINT PRIMARY KEY, refs INTEGER NOT NULL, data BYTEA NOT NULL)",
    "CREATE TABLE message_refs ("
    " queue TEXT NOT NULL,"
    " message_id BIGINT NOT NULL,"
    " delivery_count INTEGER NOT NULL,"
    " PRIMARY KEY (queue, message_id))",
    "CREATE TABLE duplicate_ids ("
    " seq BIGSERIAL PRIMARY KEY,"
    " address TEXT NOT NULL,"
    " duplicate_id BYTEA NOT NULL,"
    " UNIQUE (address, duplicate_id))",
    "CREATE INDEX duplicate_ids_by_age ON duplicate_ids (address, seq)",
    "INSERT INTO store_state (key, value) VALUES ('highest_message_id', 0), ('clean_stop', 1)",
    *_LARGE_BODIES,
)

_LOCK = 0x7478_6272  # "txbr": the advisory lock held while the schema is prepared
DEFAULT_CONNECT_TIMEOUT = 10


def one_line(error: BaseException) -> str:
    """An error's text on one line (the server's messages span several)."""
    return re.sub(r"\s+", " ", str(error)).strip()


def describe(url: str) -> str:
    """The URL without its password, for errors and logs; ``StoreError`` if malformed."""
    if not url.startswith(("postgresql://", "postgres://")):
        raise StoreError(f"not a PostgreSQL URL: {url!r} does not start with postgresql://")
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise StoreError(f"not a PostgreSQL URL: {one_line(error)}") from None
    user = f"{parts['user']}@" if "user" in parts else ""
    port = f":{parts['port']}" if "port" in parts else ""
    host = parts.get("host", "")
    options = f" ({parts['options']})" if "options" in parts else ""
    return f"postgresql://{user}{host}{port}/{parts.get('dbname', '')}{options}"


def connect(url: str, session: str = "") -> psycopg.Connection[tuple[object, ...]]:
    """Connect to ``url`` with the schema created or checked, commits durable
    (``synchronous_commit``) whatever the server's default; ``StoreError`` saying why not.
    ``session``: the connection's ``application_name`` ("": the URL's, if it gives one)."""
    where = describe(url)
    given = conninfo_to_dict(url)
    options: dict[str, object] = (
        {} if "connect_timeout" in given else {"connect_timeout": DEFAULT_CONNECT_TIMEOUT}
    )
    if session:  # else the URL's own, if any
        options["application_name"] = session
    try:
        connection = psycopg.connect(url, autocommit=False, **options)  # type: ignore[arg-type]
    except psycopg.Error as error:
        raise StoreError(f"{where}: cannot connect: {one_line(error)}") from None
    try:
        connection.execute("SET synchronous_commit = on")
        # Plan each statement for its arrays: a generic plan, made while the tables were
        # small, would scan them whole (every batch slower as they grow).
        connection.execute("SET plan_cache_mode = force_custom_plan")
        _prepare(connection, where)
    except psycopg.Error as error:
        connection.close()
        raise StoreError(f"{where}: cannot prepare the schema: {one_line(error)}") from None
    except BaseException:
        connection.close()
        raise
    return connection


def _prepare(connection: psycopg.Connection[tuple[object, ...]], where: str) -> None:
    try:
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        schema = connection.execute("SELECT current_schema()").fetchone()
        if schema is None or schema[0] is None:
            raise StoreError(f"{where}: no schema of the search_path exists to create in")
        found = connection.execute("SELECT to_regclass('schema_version')").fetchone()
        if found is None or found[0] is None:
            _create(connection, where, str(schema[0]))
        else:
            _check_version(connection, where)
        connection.commit()
    except BaseException:
        connection.rollback()
        raise


def _create(connection: psycopg.Connection[tuple[object, ...]], where: str, schema: str) -> None:
    # The HA lease's tables (bridge.ha.lease) may be there first: the nodes share the schema.
    others = connection.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename <> ALL(%s)",
        (schema, list(LEASE_TABLES)),
    ).fetchone()
    if others is not None and others[0]:
        raise StoreError(
            f"{where}: schema {schema!r} holds tables but not a txbridge message store"
        )
    for statement in SCHEMA:
        connection.execute(statement)
    connection.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))


def _check_version(connection: psycopg.Connection[tuple[object, ...]], where: str) -> None:
    row = connection.execute("SELECT version FROM schema_version").fetchone()
    if row is None:
        raise StoreError(f"{where}: the schema_version table is empty")
    version = row[0]
    assert isinstance(version, int)
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{where} holds message store schema version {version}, written by a newer "
            f"txbridge; this one reads versions up to {SCHEMA_VERSION}"
        )
    while version < SCHEMA_VERSION:
        steps = MIGRATIONS.get(version)
        if steps is None:
            raise StoreError(
                f"{where} holds message store schema version {version}, which no migration "
                f"brings to version {SCHEMA_VERSION}"
            )
        for statement in steps:
            connection.execute(statement)
        version += 1
        connection.execute("UPDATE schema_version SET version = %s", (version,))
