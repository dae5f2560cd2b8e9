"""Kill -9 while writing: nothing confirmed is lost, nothing acknowledged comes back.

A real child process (tests/store/crash_writer.py) writes to a store (a real SQLite file,
or a schema on the PostgreSQL server) and prints each confirmation; the test kills it with
SIGKILL at three different points while it writes, then opens the store itself and checks
every promise the child made.
"""

from __future__ import annotations

import pytest
import pytest_twisted

from tests.postgresql import schema_url
from tests.store.crash_writer import body


@pytest_twisted.ensureDeferred
@pytest.mark.parametrize("kill_after", [200, 450, 800])
async def test_confirmed_operations_survive_a_kill_at_any_point(spawn, stores, kill_after):
    url = [] if stores.pg_schema is None else [schema_url(stores.pg_schema)]
    child = spawn(
        "-m", "tests.store.crash_writer", str(stores.data_dir), str(kill_after), *url, name="writer"
    )
    await child.next_event("milestone")
    child.kill()
    await child.ended

    # Everything the child printed before it died was confirmed, also what it printed
    # after the test decided to kill it.
    added = [event["id"] for event in child.named("add")]
    acked = {event["id"] for event in child.named("ack")}
    acking = {event["id"] for event in child.named("acking")}
    assert len(added) >= kill_after
    assert acked
    _, recovered = await stores.open()

    stored = recovered.messages.get("q", [])
    stored_ids = [entry.message.id for entry in stored]
    assert stored_ids == sorted(stored_ids)
    # A confirmed add is gone only if its acknowledgement was issued: once confirmed, the
    # message must be gone; issued but unconfirmed, it may be either.
    must_remain = [message_id for message_id in added if message_id not in acking]
    assert set(must_remain) <= set(stored_ids)
    assert acked.isdisjoint(stored_ids)
    assert len(must_remain) >= len(added) // 3
    # Unconfirmed operations may or may not have made it, but only whole: every stored
    # message is intact, and ids were never reused.
    for entry in stored:
        assert entry.message.body == body(entry.message.id)
        assert entry.message.headers == {"n": entry.message.id}
        assert entry.delivery_count == 1  # killed: each may have been delivered
    assert recovered.after_crash
    assert recovered.highest_message_id >= max(added)
