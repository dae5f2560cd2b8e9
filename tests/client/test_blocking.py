"""The blocking facade, end to end in a child process (crochet runs its own reactor thread,
which cannot share the test's reactor) against the node double, or a real node, in that
child."""

from __future__ import annotations

import pytest_twisted


@pytest_twisted.ensureDeferred
async def test_a_script_sends_receives_and_acks(spawn):
    child = spawn("-m", "tests.client.blocking_child", name="blocking client")
    received = await child.next_event("received")
    assert (received["body"], received["headers"]) == ("body", {"kind": "test"})
    first = {"durable": True, "duplicate_id": "order-1", "is_large": False}
    assert await child.next_event("described") == {
        "event": "described",
        **first,
        "redelivered": False,
        "delivery_count": 1,
    }
    assert await child.next_event("redelivered") == {
        "event": "redelivered",
        **first,
        "redelivered": True,
        "delivery_count": 2,
    }
    assert (await child.next_event("timeout"))["message"] is True
    large = await child.next_event("large")
    assert (large["body"], large["is_large"]) == ("a large body from a file", True)
    refused = await child.next_event("refused")
    assert refused["error"] == "consumer on queue 'missing' refused (NOT_FOUND): no queue 'missing'"
    await child.next_event("closed")
    assert await child.ended == 0
    # A receive that timed out was cancelled, and its cancellation taken: crochet has no
    # unhandled CancelledError to print at exit.
    assert child.stderr.decode() == ""


@pytest_twisted.ensureDeferred
async def test_a_send_without_credit_blocks_up_to_its_timeout_then_raises(spawn):
    child = spawn("-m", "tests.client.blocking_credit_child", name="blocked producer")
    address = await child.next_event("address")
    assert (address["routing"], address["max"], address["policy"]) == ("anycast", 20000, "BLOCK")
    blocked = await child.next_event("blocked")
    # The address takes 20,000 bytes; a 4 KiB window lets a few more in, then no credit.
    assert 20 <= blocked["sent"] <= 30 and blocked["depth"] == blocked["sent"]
    assert blocked["error"].startswith("no producer credit for address 'orders' within 0.5s")
    assert "nothing was sent" in blocked["error"]
    assert (await child.next_event("after"))["depth"] == blocked["sent"]
    assert await child.ended == 0
