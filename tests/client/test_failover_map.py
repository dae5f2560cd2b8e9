"""The client follows its cluster's failover map (bridge/client/api.py): it keeps the
TOPOLOGY, asks for the store it was on, retries its own node first (a glitch is not a
failover), then the node's failover nodes, follows a redirect at once, and gives up after
max-redirects in a row; a node that serves nothing (it drains) is not tried again. Node
doubles here; tests/system/test_ha_cluster_clients.py runs real members."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor

from bridge.client.api import connect
from bridge.client.errors import ConnectionLost
from bridge.protocol import ClusterConnect, Topology, TopologyMember
from tests.client.node_double import NodeDouble
from tests.heads.conftest import eventually
from transport.reconnect import ReconnectPolicy

QUICK = ReconnectPolicy(0.02, 1.0, 0.02, reconnect_attempts=2)


async def cluster() -> tuple[dict[str, NodeDouble], dict[str, str]]:
    """Doubles a, b and c; a's map sends a's clients to b."""
    doubles = {name: NodeDouble(name=name) for name in "abc"}
    urls = {name: await double.listen(reactor) for name, double in doubles.items()}
    doubles["a"].topology = Topology(
        (
            TopologyMember("a", "h1", (urls["a"],), ("a",), ("b",)),
            TopologyMember("b", "h2", (urls["b"],), ("b",), ("a",)),
        )
    )
    return doubles, urls


def stores_asked(double: NodeDouble) -> list[str]:
    return [each.store for each in double.received if isinstance(each, ClusterConnect)]


@pytest_twisted.ensureDeferred
async def test_after_its_node_is_gone_the_client_follows_the_map_and_the_redirect():
    doubles, urls = await cluster()
    doubles["b"].redirects["a"] = (urls["c"],)
    client = await connect(reactor, urls["a"], reconnect=QUICK)
    try:
        await eventually(lambda: client.topology == doubles["a"].topology)
        await doubles["a"].stop()
        await eventually(lambda: client.node_name == "c")
        assert stores_asked(doubles["a"]) == [""]
        assert stores_asked(doubles["b"]) == ["a"]
        assert stores_asked(doubles["c"]) == ["a"]
        assert str(client.url) == urls["c"]
    finally:
        await client.close()
        for double in doubles.values():
            await double.stop()


@pytest_twisted.ensureDeferred
async def test_a_drop_shorter_than_the_retry_window_keeps_the_client_on_its_node():
    doubles, urls = await cluster()
    client = await connect(reactor, urls["a"], reconnect=QUICK)
    try:
        await eventually(lambda: client.topology is not None)
        doubles["a"].connections[0].drop()
        await eventually(lambda: len(stores_asked(doubles["a"])) == 2 and client.is_writable)
        assert stores_asked(doubles["a"]) == ["", "a"]
        assert client.node_name == "a" and doubles["b"].received == []
    finally:
        await client.close()
        for double in doubles.values():
            await double.stop()


@pytest_twisted.ensureDeferred
async def test_a_draining_node_sends_its_clients_to_its_failover_node_at_once():
    """The node's last TOPOLOGY says it serves nothing (it drains): once it closes the
    connection the client spends no attempt on it and asks its failover node for any
    store."""
    doubles, urls = await cluster()
    patient = ReconnectPolicy(0.02, 1.0, 0.02, reconnect_attempts=50)
    client = await connect(reactor, urls["a"], reconnect=patient)
    try:
        await eventually(lambda: client.topology is not None)
        draining = Topology(
            (
                TopologyMember("a", "h1", (urls["a"],), (), ("b",)),
                TopologyMember("b", "h2", (urls["b"],), ("b",), ("a",)),
            )
        )
        connection = doubles["a"].connections[0]
        connection.out(draining)
        await eventually(lambda: client.topology == draining)
        connection.drop()
        await eventually(lambda: client.node_name == "b" and client.is_writable)
        assert stores_asked(doubles["a"]) == [""]  # not tried again, though it listens
        assert stores_asked(doubles["b"]) == [""]
        assert str(client.url) == urls["b"]
    finally:
        await client.close()
        for double in doubles.values():
            await double.stop()


@pytest_twisted.ensureDeferred
async def test_redirects_in_a_circle_end_after_max_redirects():
    doubles, urls = await cluster()
    doubles["b"].redirects["a"] = (urls["c"],)
    doubles["c"].redirects["a"] = (urls["b"],)
    client = await connect(reactor, urls["a"], reconnect=QUICK, max_redirects=3)
    try:
        await eventually(lambda: client.topology is not None)
        ended = client.when_closed()
        await doubles["a"].stop()
        error = await ended
        assert isinstance(error, ConnectionLost)
        assert "redirected 4 times" in str(error) and "max-redirects 3" in str(error)
        assert len(stores_asked(doubles["b"])) + len(stores_asked(doubles["c"])) == 4
    finally:
        await client.close()
        for double in doubles.values():
            await double.stop()


def test_max_redirects_must_not_be_negative():
    with pytest.raises(ValueError, match="max-redirects"):
        connect(reactor, "tcp://127.0.0.1:1", max_redirects=-1)
