"""Child process for test_blocking: a node double in crochet's reactor thread, and the
blocking client used from the main thread as a script would. Prints JSON lines."""

from __future__ import annotations

import io
import json
import sys

import crochet

crochet.setup()

from twisted.internet import reactor  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402

from bridge.client.blocking import BlockingMessage, connect  # noqa: E402
from bridge.client.errors import NotFound  # noqa: E402
from tests.client.node_double import NodeDouble  # noqa: E402


def event(name: str, **fields: object) -> None:
    print(json.dumps({"event": name, **fields}), flush=True)


def describe(message: BlockingMessage) -> dict[str, object]:
    duplicate_id = message.duplicate_id
    return {
        "durable": message.durable,
        "duplicate_id": None if duplicate_id is None else duplicate_id.decode(),
        "redelivered": message.redelivered,
        "delivery_count": message.delivery_count,
        "is_large": message.is_large,
    }


@crochet.wait_for(10)
def start(node: NodeDouble) -> Deferred[str]:
    return Deferred.fromCoroutine(node.listen(reactor))


def main() -> None:
    node = NodeDouble(large_delivery_size=16)
    url = start(node)
    with connect(url, user="alice", password="secret", min_large_message_size=16) as client:
        client.create_queue("orders")
        client.send(
            "orders", b"body", headers={"kind": "test"}, durable=True, duplicate_id=b"order-1"
        )
        consumer = client.consumer("orders")
        message = consumer.receive(timeout=5)
        assert message is not None
        event("received", body=message.body.decode(), headers=dict(message.headers))
        event("described", **describe(message))
        message.nack()
        again = consumer.receive(timeout=5)
        assert again is not None
        event("redelivered", **describe(again))
        again.ack()
        event("timeout", message=consumer.receive(timeout=0.2) is None)
        client.send("orders", io.BytesIO(b"a large body from a file"))
        large = consumer.receive(timeout=5)
        assert large is not None
        event("large", body=large.body_file.read().decode(), is_large=large.is_large)
        large.ack()
        try:
            client.consumer("missing")
        except NotFound as error:
            event("refused", error=str(error))
    event("closed")


if __name__ == "__main__":
    main()
    sys.exit(0)
