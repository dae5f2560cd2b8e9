"""The blocking facade, end to end in a child process (crochet runs its own reactor thread,
which cannot share the test's reactor) against the node double in that child."""

from __future__ import annotations

import pytest_twisted


@pytest_twisted.ensureDeferred
async def test_a_script_sends_receives_and_acks(spawn):
    child = spawn("-m", "tests.client.blocking_child", name="blocking client")
    received = await child.next_event("received")
    assert (received["body"], received["headers"]) == ("body", {"kind": "test"})
    assert (await child.next_event("timeout"))["message"] is True
    assert (await child.next_event("large"))["body"] == "a large body from a file"
    refused = await child.next_event("refused")
    assert refused["error"] == "consumer on queue 'missing' refused (NOT_FOUND): no queue 'missing'"
    await child.next_event("closed")
    assert await child.ended == 0
