"""What only the PostgreSQL store has: a server that can be away, refuse, or drop us."""

from __future__ import annotations

import re

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import gatherResults

from bridge.store import CommitFailed, InvalidOperation, StoreError
from bridge.store.postgresql import PostgreSQLMessageStore
from tests.postgresql import execute, schema_url
from tests.store.conftest import Stores, anycast, message


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("nonsense", "does not start with postgresql://"),
        ("postgresql://[bad", 'looking for matching "]"'),
        ("postgresql://u@h/db?bogus=1", 'invalid URI query parameter: "bogus"'),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_malformed_url_fails_open_saying_why(tmp_path, url, why):
    store = PostgreSQLMessageStore(url, tmp_path, reactor)
    with pytest.raises(StoreError, match=f"^not a PostgreSQL URL: .*{re.escape(why)}"):
        await store.open()


@pytest_twisted.ensureDeferred
async def test_an_unreachable_server_fails_open_with_one_line(tmp_path, pg_schema):
    store = PostgreSQLMessageStore(
        "postgresql://postgres@127.0.0.1:1/test?connect_timeout=5", tmp_path, reactor
    )
    with pytest.raises(
        StoreError, match=r"^postgresql://postgres@127.0.0.1:1/test: cannot connect"
    ):
        await store.open()
    try:
        await store.open()
    except StoreError as error:
        assert "\n" not in str(error)


@pytest_twisted.ensureDeferred
async def test_missing_privileges_fail_open_saying_so(tmp_path, pg_schema, pg_reader_role):
    url = schema_url(pg_schema).replace("postgres@", f"{pg_reader_role}@", 1)
    store = PostgreSQLMessageStore(url, tmp_path, reactor)
    with pytest.raises(StoreError, match="cannot prepare the schema: permission denied"):
        await store.open()


@pytest_twisted.ensureDeferred
async def test_a_schema_holding_other_tables_is_not_taken_for_a_store(tmp_path, pg_schema):
    execute(pg_schema, "CREATE TABLE something (x integer)")
    stores = Stores(tmp_path, pg_schema)
    with pytest.raises(StoreError, match="holds tables but not a txbridge message store"):
        await stores.open()


@pytest_twisted.ensureDeferred
async def test_a_broken_connection_fails_its_batch_and_the_next_one_reconnects(tmp_path, pg_schema):
    name = f"txbridge_{pg_schema}"
    url = f"{schema_url(pg_schema)}&application_name={name}"
    store = PostgreSQLMessageStore(url, tmp_path, reactor)
    await store.open()
    try:
        await store.create_queue(anycast("orders"))
        await store.add(message(1), ["orders"])
        ((killed,),) = execute(
            pg_schema,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (name,),
        )
        assert killed == 1
        with pytest.raises(CommitFailed, match="none of them was written"):
            await store.add(message(2), ["orders"])
        await store.add(message(3), ["orders"])
        with pytest.raises(InvalidOperation, match="already stored"):
            await store.add(message(3), ["orders"])
    finally:
        await store.close()
    reopened = PostgreSQLMessageStore(url, tmp_path, reactor)
    recovered = await reopened.open()
    await reopened.close()
    assert [m.message.id for m in recovered.messages["orders"]] == [1, 3]


@pytest_twisted.ensureDeferred
async def test_a_server_error_fails_the_whole_batch_and_the_store_goes_on(postgresql_stores):
    store, _ = await postgresql_stores.open()
    await gatherResults([store.create_queue(anycast(name)) for name in ("orders", "blocked")])
    postgresql_stores.execute(
        "ALTER TABLE message_refs ADD CONSTRAINT refuse CHECK (queue <> 'blocked')"
    )
    batch = [store.add(message(1), ["orders"]), store.add(message(2), ["blocked"])]
    batch.append(store.update_delivery_count("orders", 1, 2))
    for deferred in batch:
        with pytest.raises(CommitFailed, match=r"a batch of 3 operations .* violates check"):
            await deferred
    await store.add(message(3), ["orders"])
    await store.add(message(1), ["orders"])  # nothing of the failed batch was written
    _, recovered = await postgresql_stores.reopen(store)
    assert [m.message.id for m in recovered.messages["orders"]] == [1, 3]
    assert recovered.highest_message_id == 3
