"""Security on the STOMP head, with the settings of the core head's tests: logins through
the SecurityStore (nothing in the ERROR that helps an attacker), every SEND, SUBSCRIBE,
ACK and NACK checked, each refusal naming the permission and the address."""

from __future__ import annotations

import attrs
import pytest
import pytest_twisted


@pytest.mark.parametrize(
    ("login", "passcode"), [("alice", "wrong"), ("nobody", "x"), (None, None), ("alice", None)]
)
@pytest_twisted.ensureDeferred
async def test_wrong_credentials_get_an_error_without_detail(secure_stomp_node, login, passcode):
    client = await secure_stomp_node.raw()
    await client.connect(login=login, passcode=passcode)
    error = await client.error()
    assert client.of("CONNECTED") == []
    assert error.header("message") == "authentication failed"
    assert error.body == b"authentication failed"


@pytest_twisted.ensureDeferred
async def test_stomp_py_logs_in_with_login_and_passcode(secure_stomp_node):
    client = await secure_stomp_node.client(login="alice", passcode="alice-secret")
    await client.confirmed_send("/queue/orders", b"paid")
    assert secure_stomp_node.broker.queue("orders").depth == 1


async def _denied(node, user, frames):
    client = await node.raw()
    connected = await client.connect(login=user, passcode=f"{user}-secret")
    assert connected.command == "CONNECTED"
    for command, headers in frames:
        client.send(command, headers)
    error = await client.error()
    assert error.header("message") == "permission denied"
    return error.body.decode()


@pytest_twisted.ensureDeferred
async def test_send_needs_the_send_permission(secure_stomp_node):
    detail = await _denied(secure_stomp_node, "bob", [("SEND", {"destination": "/queue/orders"})])
    assert detail == "user 'bob' lacks permission 'send' on address 'orders'"
    assert secure_stomp_node.broker.queue("orders").depth == 0


@pytest_twisted.ensureDeferred
async def test_subscribe_needs_consume_and_a_new_address_needs_create(secure_stomp_node):
    detail = await _denied(
        secure_stomp_node,
        "alice",
        [("SUBSCRIBE", {"id": "1", "destination": "/queue/orders"})],
    )
    assert detail == "user 'alice' lacks permission 'consume' on address 'orders' queue 'orders'"
    detail = await _denied(
        secure_stomp_node, "bob", [("SEND", {"destination": "/queue/brand.new"})]
    )
    assert "lacks permission 'create-address' on address 'brand.new'" in detail
    detail = await _denied(
        secure_stomp_node,
        "bob",
        [("SUBSCRIBE", {"id": "1", "destination": "/topic/orders.news", "durable": "true"})],
    )
    assert "lacks permission 'create-address' on address 'orders.news'" in detail
    root = await secure_stomp_node.raw()
    await root.connect(login="root", passcode="root-secret")
    root.send("SUBSCRIBE", {"id": "1", "destination": "/queue/private.x"})
    error = await root.error()
    assert error.header("message") == "no such destination"
    assert error.body.startswith(b"/queue/private.x: address 'private.x' does not exist")


@pytest_twisted.ensureDeferred
async def test_ack_and_nack_are_checked_too(secure_stomp_node):
    """An ACK is checked against the consume permission as it is now: a user whose role
    lost it (the users file changed) can no longer settle what it holds."""
    producer = await secure_stomp_node.client(login="alice", passcode="alice-secret")
    await producer.confirmed_send("/queue/orders", b"1")
    await producer.confirmed_send("/queue/orders", b"2")
    bob = await secure_stomp_node.raw()
    await bob.connect(login="bob", passcode="bob-secret")
    bob.send("SUBSCRIBE", {"id": "s", "destination": "/queue/orders", "ack": "client-individual"})
    first, second = await bob.next("MESSAGE"), await bob.next("MESSAGE", 2)
    bob.send("ACK", {"id": first.header("ack"), "receipt": "ok"})
    await bob.receipt("ok")
    security = secure_stomp_node.head.security
    settings = security.settings
    demoted = [s for s in settings.settings if s.match != "orders.#"]
    security.reload(attrs.evolve(settings, settings=tuple(demoted)))
    bob.send("NACK", {"id": second.header("ack")})
    error = await bob.error()
    assert error.header("message") == "permission denied"
    assert error.body.startswith(b"user 'bob' lacks permission 'consume' on address 'orders'")


@pytest_twisted.ensureDeferred
async def test_a_refusal_costs_nobody_else(secure_stomp_node):
    root = await secure_stomp_node.client(login="root", passcode="root-secret")
    await _denied(secure_stomp_node, "carol", [("SEND", {"destination": "/queue/orders"})])
    await root.confirmed_send("/queue/orders", b"still served")


@pytest_twisted.ensureDeferred
async def test_a_send_after_a_reload_meets_the_new_permissions(secure_stomp_node):
    """A connection's SENDs to one destination are checked once per read: the read after
    alice lost the send permission is refused (the protocol ends each read's run)."""
    alice = await secure_stomp_node.raw()
    await alice.connect(login="alice", passcode="alice-secret")
    alice.send("SEND", {"destination": "/queue/orders", "receipt": "1"}, b"one")
    await alice.receipt("1")
    security = secure_stomp_node.head.security
    settings = security.settings
    kept = [s for s in settings.settings if s.match != "orders.#"]
    security.reload(attrs.evolve(settings, settings=tuple(kept)))
    alice.send("SEND", {"destination": "/queue/orders", "receipt": "2"}, b"two")
    error = await alice.error()
    assert error.header("message") == "permission denied"
    assert error.header("receipt-id") == "2"
    assert secure_stomp_node.broker.queue("orders").depth == 1
