"""Child process for test_blocking: a real node (broker and core head) in crochet's
reactor thread with a small BLOCK address, and the blocking client asking how it is set
up, then sending to it until the node withholds its credit. Prints JSON lines."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import crochet

crochet.setup()

from twisted.internet import reactor  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402

from bridge.client.blocking import ProducerBlocked, connect  # noqa: E402
from bridge.config.node import parse_node_config  # noqa: E402
from bridge.heads.core import CoreHead  # noqa: E402
from bridge.node.broker import Broker  # noqa: E402
from bridge.store.sqlite import SQLiteMessageStore  # noqa: E402
from security import SecurityStore  # noqa: E402

LIMIT = 20_000
WINDOW = 4096


def event(name: str, **fields: object) -> None:
    print(json.dumps({"event": name, **fields}), flush=True)


async def serve(folder: Path) -> tuple[Broker, str]:
    document = {
        "node": {"name": "a", "data-dir": "data"},
        "address": [
            {
                "name": "orders",
                "routing": "anycast",
                "max-size-bytes": LIMIT,
                "address-full-policy": "BLOCK",
            }
        ],
    }
    config = parse_node_config(document, folder / "node.toml")
    broker = Broker(config, SQLiteMessageStore(config.data_dir, reactor))
    await broker.open()
    head = CoreHead(
        broker,
        SecurityStore(config.security, reactor.seconds),
        node_name="a",
        node_id="a",
        reactor=reactor,
    )
    port = await head.listen("tcp://127.0.0.1:0", producer_window_size=WINDOW)
    return broker, f"tcp://127.0.0.1:{port.getHost().port}"


@crochet.wait_for(10)
def start(folder: Path) -> Deferred[tuple[Broker, str]]:
    return Deferred.fromCoroutine(serve(folder))


@crochet.wait_for(10)
def depth(broker: Broker) -> int:
    return broker.queue("orders").depth


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        broker, url = start(Path(folder))
        with connect(url, timeout=0.5) as client:
            info = client.address_info("orders")
            event(
                "address",
                routing=info.routing,
                max=info.max_size_bytes,
                policy=info.address_full_policy,
            )
            sent = 0
            try:
                for _ in range(1000):
                    client.send("orders", b"x" * 1000, durable=False)
                    sent += 1
            except ProducerBlocked as blocked:
                event("blocked", sent=sent, depth=depth(broker), error=str(blocked))
            event("after", depth=depth(broker))


if __name__ == "__main__":
    main()
    sys.exit(0)
