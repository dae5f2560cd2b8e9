"""TLS in node processes, as ``txbridge node`` runs them: a node that uses no TLS never
loads OpenSSL or cryptography (about 14 MiB of its memory), and one that does serves
STOMP and the core protocol over TLS and bridges to another node over TLS, loading them
when it needs them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
import stomp
from twisted.internet.threads import deferToThread

from tests.security.certs import issue, make_ca
from tests.system.bridges import bridge_table, wait_bridge, wait_queue_empty
from tests.system.nodes import NodeProcess, node_document
from tests.system.test_stomp_flow import Listener, connect

COUNT = 50
ORDERS = [{"name": "orders", "routing": "anycast"}]
PLAIN_STOMP = {"name": "stomp", "url": "tcp://127.0.0.1:0", "protocols": ["stomp"]}
PLAIN_CORE = {"name": "core", "url": "tcp://127.0.0.1:0", "protocols": ["core"]}

pytestmark = pytest.mark.system


def loaded_cryptography(node: NodeProcess) -> bool:
    """Whether the node process has loaded cryptography (which pyOpenSSL imports): its
    compiled library mapped into the process's memory."""
    assert node.pid is not None
    return "/cryptography/" in Path(f"/proc/{node.pid}/maps").read_text()


def produce(port: int, ssl: dict[str, Any] | None = None) -> None:
    """COUNT persistent sends, then the last one's receipt; over TLS with ``ssl``."""
    conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
    if ssl is not None:
        conn.set_ssl(for_hosts=[("127.0.0.1", port)], **ssl)
    listener = Listener()
    conn.set_listener("l", listener)
    conn.connect(wait=True)
    for n in range(COUNT):
        headers = {"persistent": "true", "seq": str(n)}
        if n == COUNT - 1:
            headers["receipt"] = "last"
        conn.send("/queue/orders", f"order {n}".encode(), headers=headers)
    listener.wait(lambda: "last" in listener.receipts, "the last send's receipt")
    conn.disconnect(receipt="bye")


def consume(port: int, ssl: dict[str, Any] | None = None) -> list[str]:
    """Every message's seq, acknowledged one by one; over TLS with ``ssl``."""
    if ssl is None:
        conn, listener = connect(port)
    else:
        conn = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
        conn.set_ssl(for_hosts=[("127.0.0.1", port)], **ssl)
        listener = Listener()
        conn.set_listener("l", listener)
        conn.connect(wait=True)
    conn.subscribe("/queue/orders", id="c", ack="client-individual")
    for taken in range(COUNT):
        listener.wait(lambda n=taken: len(listener.messages) > n, f"message {taken}")
        conn.ack(listener.messages[taken].headers["ack"])
    conn.disconnect(receipt="bye")
    return [frame.headers["seq"] for frame in listener.messages]


@pytest_twisted.ensureDeferred
async def test_a_node_without_tls_never_loads_openssl(nodes):
    node = await nodes(
        node_document("a", acceptor=[PLAIN_CORE, PLAIN_STOMP], address=ORDERS), name="a"
    ).wait_started()
    await deferToThread(produce, node.ports["stomp"])
    assert await deferToThread(consume, node.ports["stomp"]) == [str(n) for n in range(COUNT)]
    assert not loaded_cryptography(node), node.output


@pytest_twisted.ensureDeferred
async def test_a_node_serves_and_bridges_over_tls(nodes, tmp_path):
    """Node B accepts STOMP and the core protocol over TLS, requiring client certificates;
    node A, with no TLS acceptor, bridges its queue to B over TLS with its own
    certificate. stomp.py sends to A in the clear and takes everything from B over TLS."""
    ca = make_ca()
    ca_path, _ = ca.write(tmp_path, "ca")
    server = issue(ca, "node-b", dns=("localhost",), ips=("127.0.0.1",), server=True)
    b_cert, b_key = server.write(tmp_path, "node-b")
    a_cert, a_key = issue(ca, "node-a").write(tmp_path, "node-a")
    client_cert, client_key = issue(ca, "consumer").write(tmp_path, "consumer")
    accept = f"?cert={b_cert}&key={b_key}&ca={ca_path}&verify-client=true"
    b = await nodes(
        node_document(
            "b",
            acceptor=[
                {"name": "core", "url": f"tls://127.0.0.1:0{accept}", "protocols": ["core"]},
                {"name": "stomp", "url": f"tls://127.0.0.1:0{accept}", "protocols": ["stomp"]},
            ],
            address=ORDERS,
        ),
        name="b",
    ).wait_started()
    target = f"tls://127.0.0.1:{b.ports['core']}?cert={a_cert}&key={a_key}&ca={ca_path}"
    a = await nodes(
        node_document(
            "a",
            acceptor=[PLAIN_CORE, PLAIN_STOMP],
            address=ORDERS,
            bridge=[bridge_table("to-b", "orders", target)],
        ),
        name="a",
    ).wait_started()
    await wait_bridge(a, "to-b", lambda entry: entry["state"] == "STARTED", "started")
    await deferToThread(produce, a.ports["stomp"])
    await wait_queue_empty(a, "orders")
    ssl = {"cert_file": str(client_cert), "key_file": str(client_key), "ca_certs": str(ca_path)}
    assert await deferToThread(consume, b.ports["stomp"], ssl) == [str(n) for n in range(COUNT)]
    assert loaded_cryptography(a) and loaded_cryptography(b)
