"""What a reconnecting bridge logs and shows: each retry with its real number and its real
wait (the bridge's settings, not its one-attempt client's), the reconnection, and the
error cleared from the status; never the client's own reconnect words."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.logger import formatEvent, globalLogPublisher

from bridge.client import AddressInfo
from bridge.client.errors import ConnectionLost
from bridge.forward.bridge import Bridge
from bridge.forward.forwarded import Origin
from bridge.forward.status import BridgeState
from bridge.node.queue import Queue
from tests.forward.conftest import Nodes, bridge_config, eventually
from tests.forward.test_reconnect import ANYCAST, _free_url
from transport.urls import parse_url

URL = parse_url("tcp://127.0.0.1:1")
REFUSED = ConnectionLost(
    f"the connection to {URL} is lost: Connection refused (reconnect-attempts is 0)",
    "Connection refused",
)
"""How a bridge's one-attempt client fails to connect (tests/client checks the client)."""

CLIENT_POLICY_WORDS = ("reconnect-attempts", "gave up", "Scheduling retry")


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """Every log line of the test, formatted."""
    lines: list[str] = []

    def observe(event: dict[str, Any]) -> None:
        lines.append(formatEvent(event))

    globalLogPublisher.addObserver(observe)
    yield lines
    globalLogPublisher.removeObserver(observe)


class _Broker:
    """The source side, as far as a bridge whose target is a stand-in uses it."""

    def __init__(self) -> None:
        self.source = Queue("orders", "orders")

    def queue(self, name: str) -> Queue:
        return self.source

    def next_consumer_id(self) -> int:
        return 1

    def consume(self, *args: Any, **kwargs: Any) -> None:
        """The queue stays empty: nothing to forward."""

    def close_consumer(self, *args: Any, **kwargs: Any) -> Deferred[None]:
        return succeed(None)


class _Client:
    """A connected target, as far as the lane uses one before forwarding."""

    node_id = "id-b"
    is_closed = False

    def __init__(self) -> None:
        self.closed: Deferred[Any] = Deferred()

    def when_closed(self) -> Deferred[Any]:
        return self.closed

    def address_info(self, name: str) -> Deferred[AddressInfo]:
        return succeed(AddressInfo(name, True, "anycast", -1, "PAGE", 20000, True))

    def close(self) -> None:
        self.is_closed = True


def bridge_lines(logged: list[str]) -> list[str]:
    return [line for line in logged if line.startswith("bridge b:")]


def test_each_retry_is_logged_with_its_number_and_real_wait_then_the_reconnect(
    logged: list[str],
) -> None:
    clock = Clock()
    attempts: list[tuple[float, Deferred[Any]]] = []

    def connect(url: Any, config: Any) -> Deferred[Any]:
        attempts.append((clock.seconds(), Deferred()))
        return attempts[-1][1]

    config = bridge_config(
        "b",
        "orders",
        URL,
        retry_interval=0.5,
        retry_interval_multiplier=2.0,
        max_retry_interval=1.5,
        reconnect_attempts=-1,
    )
    bridge = Bridge(config, _Broker(), Origin("id-a", "run"), clock, connect)  # type: ignore[arg-type]
    bridge.start()
    waits = [0.5, 1.0, 1.5, 1.5]
    for number, wait in enumerate(waits, start=1):
        attempts[-1][1].errback(REFUSED)
        assert bridge_lines(logged)[-1] == f"bridge b: retry {number} to {URL} in {wait} s"
        snapshot = bridge.snapshot()
        assert snapshot.state is BridgeState.STARTING
        assert snapshot.last_error == f"cannot connect to {URL}: Connection refused"
        clock.advance(wait - 0.01)
        assert len(attempts) == number  # not before its wait
        clock.advance(0.01)
        assert len(attempts) == number + 1
    assert [at for at, _ in attempts] == [0.0, 0.5, 1.5, 3.0, 4.5]
    assert bridge_lines(logged).count(f"bridge b: cannot connect to {URL}: Connection refused") == 1

    client = _Client()
    attempts[-1][1].callback(client)
    assert bridge.snapshot().state is BridgeState.STARTED
    assert bridge.snapshot().last_error is None
    assert bridge_lines(logged)[-1] == (
        f"bridge b: reconnected to {URL} at retry 4; last error cleared "
        f"(was: cannot connect to {URL}: Connection refused)"
    )

    dropped = "Connection to the other side was lost in a non-clean fashion."
    client.closed.callback(
        ConnectionLost(f"the connection to {URL} is lost: reconnect-attempts is 0", dropped)
    )
    lost = f"lost the connection to {URL}: {dropped}"
    assert bridge_lines(logged)[-2:] == [
        f"bridge b: {lost}",
        f"bridge b: retry 1 to {URL} in 0.5 s",
    ]
    assert (bridge.snapshot().state, bridge.snapshot().last_error) == (BridgeState.STARTING, lost)
    clock.advance(0.5)
    attempts[-1][1].callback(_Client())
    assert bridge_lines(logged)[-1] == (
        f"bridge b: reconnected to {URL} at retry 1; last error cleared (was: {lost})"
    )
    assert (bridge.snapshot().state, bridge.snapshot().last_error) == (BridgeState.STARTED, None)
    assert not [line for line in logged if any(w in line for w in CLIENT_POLICY_WORDS)]


@pytest_twisted.ensureDeferred
async def test_a_forever_retrying_bridge_never_claims_to_have_given_up(
    nodes: Nodes, logged: list[str]
) -> None:
    """Against real nodes and the real client: what a target down, then up, then dropping
    the connection makes the bridge log and show."""
    a = await nodes("a", **ANYCAST)
    port, url = _free_url()
    bridges = a.start_bridges(bridge_config("b", "orders", url, reconnect_attempts=-1))
    await eventually(lambda: len([line for line in logged if " retry 3 to " in line]) > 0)
    snapshot = bridges.snapshots()[0]
    assert snapshot.state is BridgeState.STARTING
    assert snapshot.last_error is not None
    assert snapshot.last_error.startswith(f"cannot connect to {url}: Connection was refused")
    for number, wait in [(1, 0.05), (2, 0.1), (3, 0.2)]:
        assert f"bridge b: retry {number} to {url} in {wait} s" in logged
    b = await nodes("b", port=port, **ANYCAST)
    await eventually(lambda: bridges.snapshots()[0].state is BridgeState.STARTED)
    assert bridges.snapshots()[0].last_error is None
    assert any(line.startswith(f"bridge b: reconnected to {url} at retry ") for line in logged)

    await b.drop_connections()
    await eventually(lambda: bridges.snapshots()[0].reconnects == 1)
    await eventually(lambda: bridges.snapshots()[0].state is BridgeState.STARTED)
    assert f"bridge b: retry 1 to {url} in 0.05 s" in logged
    lost = [line for line in logged if line.startswith(f"bridge b: lost the connection to {url}")]
    assert len(lost) == 1
    assert f"bridge b: reconnected to {url} at retry 1; last error cleared" in "\n".join(logged)
    assert not [line for line in logged if any(w in line for w in CLIENT_POLICY_WORDS)]
