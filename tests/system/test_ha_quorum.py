"""A replication pair without a lease (docs/ha.md, "Quorum vote"): three voter nodes (plain
nodes with ``[cluster]``) and nodes a and b, each its own SQLite store. Killed with
SIGKILL under load, a's backup takes over by the voters' vote with every confirmed message;
with two voters stopped, a live node that loses its backup stops serving; the activation
sequence in the stores only ever increases, and an old live node that comes back copies
and never serves."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from bridge.client.api import connect
from bridge.store.sqlite import FILENAME
from tests.forward.conftest import eventually
from tests.system.bridges import core_acceptor, free_port
from tests.system.ha import PING, QUERY_TIMEOUT, QUICK, REAP, SLACK
from tests.system.nodes import node_document
from tests.system.replication import ha_status, management_port

COUNT = 2000
KILL_AFTER = 600
LEAD = 200
VOTE_WAIT = 2.0


def _cluster(voters: list[str]) -> dict[str, Any]:
    return {"name": "pairs", "user": "cluster", "members": voters}


def quorum_node(
    name: str, policy: str, port: int, peer_port: int, voters: list[str], **ha: Any
) -> dict[str, Any]:
    """A node of the pair: no ``lease-url``, the voters as ``[cluster] members``."""
    return node_document(
        name,
        address=[{"name": "orders", "routing": "anycast"}],
        acceptor=core_acceptor(port),
        ha={
            "policy": policy,
            "peers": [f"tcp://127.0.0.1:{peer_port}"],
            "cluster-user": "cluster",
            "lease-ping-time": f"{round(PING * 1000)}ms",
            "lease-reap-time": f"{round(REAP * 1000)}ms",
            "lease-query-timeout": f"{round(QUERY_TIMEOUT * 1000)}ms",
            "quorum-vote-wait": f"{round(VOTE_WAIT * 1000)}ms",
            **ha,
        },
        cluster={**_cluster(voters), "store": "a"},
    )


async def _voters(nodes: Any) -> tuple[list[Any], list[str]]:
    """Three plain nodes that vote, each a member of the cluster."""
    ports = [free_port() for _ in range(3)]
    urls = [f"tcp://127.0.0.1:{port}" for port in ports]
    voters = [
        nodes(
            node_document(f"v{n}", acceptor=core_acceptor(port), cluster=_cluster(urls)),
            name=f"v{n}",
        )
        for n, port in enumerate(ports, 1)
    ]
    for voter in voters:
        await voter.wait_started(SLACK)
    return voters, urls


def _sequence(node: Any, name: str) -> int:
    """The activation sequence in the node's store (its ``live_lock`` row)."""
    path = Path(node.directory) / "var" / name / FILENAME
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (epoch,) = connection.execute("SELECT epoch FROM live_lock WHERE name = 'live'").fetchone()
    finally:
        connection.close()
    return int(epoch)


async def _pair(nodes: Any, voters: list[str], a_port: int, b_port: int, **ha: Any):
    a = nodes(quorum_node("a", "replication-primary", a_port, b_port, voters, **ha), name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)
    b = nodes(quorum_node("b", "replication-backup", b_port, a_port, voters, **ha), name="b")
    await management_port(b, "b")
    await b.wait_for(r"replica: in sync with a", SLACK)
    return a, b


@pytest_twisted.ensureDeferred
async def test_a_killed_live_nodes_backup_takes_over_by_vote_with_every_confirmed_message(
    nodes, capsys
):
    """Both nodes name one core port, which the live one binds: the clients follow."""
    _, voters = await _voters(nodes)
    port = free_port()
    a, b = await _pair(nodes, voters, port, port)
    received: dict[int, int] = {}

    def on_message(message: Any) -> None:
        seq = int(message.body)
        received[seq] = received.get(seq, 0) + 1
        message.ack()

    reader = await connect(reactor, a.core_url, reconnect=QUICK)
    await reader.consumer("orders", on_message=on_message)
    writer = await connect(reactor, a.core_url, reconnect=QUICK)
    outcomes: dict[int, object] = {}

    async def produce() -> None:
        for seq in range(COUNT):
            await eventually(lambda seq=seq: seq - len(received) <= LEAD, timeout=120)
            if not writer.is_writable:
                await writer.when_writable()
            writer.send_nowait(
                "orders",
                b"%d" % seq,
                duplicate_id=b"seq-%d" % seq,
                on_settled=lambda outcome, seq=seq: outcomes.__setitem__(seq, outcome),
            )

    producing = Deferred.fromCoroutine(produce())
    try:
        await eventually(lambda: len(outcomes) >= KILL_AFTER, timeout=120)
        live = b.wait_for(r"node b: LIVE, epoch 2", SLACK)
        await a.stop(signal.SIGKILL)
        assert len(outcomes) < COUNT, "the producer finished before the kill: raise COUNT"
        await live
        await b.wait_started(SLACK)
        await producing
        await eventually(lambda: len(outcomes) == COUNT, timeout=120)
        assert all(outcome is None for outcome in outcomes.values()), outcomes
        await eventually(lambda: len(received) == COUNT, timeout=120)
    finally:
        await writer.close()
        await reader.close()
    assert set(received) == set(range(COUNT))
    assert "node b: the quorum granted sequence 2" in b.output
    shown = await ha_status(b, capsys)
    assert (shown["state"], shown["epoch"]) == ("LIVE", 2), shown
    vote = shown["last_vote"]
    assert (vote["kind"], vote["sequence"], vote["won"]) == ("takeover", 2, True), vote
    assert vote["grants"] >= vote["needed"] == 2, vote


@pytest_twisted.ensureDeferred
async def test_without_a_majority_a_live_node_that_loses_its_backup_stops_serving(nodes, capsys):
    voter_nodes, voters = await _voters(nodes)
    a, b = await _pair(
        nodes, voters, free_port(), free_port(), **{"vote-on-replication-failure": True}
    )
    client = await connect(reactor, a.core_url)
    await client.send("orders", b"confirmed with b in sync")
    for voter in voter_nodes[1:]:
        await voter.stop(signal.SIGTERM)
    stopped = a.wait_for(r"node a: stops serving: lost the quorum vote without its backup", SLACK)
    await b.stop(signal.SIGKILL)
    sending = client.send("orders", b"never confirmed alone")
    await stopped
    try:
        await sending
    except Exception:
        pass
    else:
        raise AssertionError("a confirmed a send without its backup and without a majority")
    await client.close()
    shown = await ha_status(a, capsys)
    assert shown["state"] in ("FENCED", "BACKUP"), shown
    assert "lost the quorum vote" in shown["reason"], shown
    vote = shown["last_vote"]
    assert vote["won"] is False and vote["grants"] < vote["needed"], vote
    b.started.addErrback(lambda _: None)  # killed as a backup: its start never finished


@pytest_twisted.ensureDeferred
async def test_the_activation_sequence_only_increases_and_an_old_live_node_never_serves(
    nodes, capsys
):
    """a live at 1; killed, b takes over at 2; a comes back, is refused by the voters (its
    store is at 1), copies b's store (2); b killed, a takes over at 3."""
    _, voters = await _voters(nodes)
    a_port, b_port = free_port(), free_port()
    a, b = await _pair(nodes, voters, a_port, b_port)
    seen = {"a": [_sequence(a, "a")], "b": [_sequence(b, "b")]}
    client = await connect(reactor, a.core_url)
    await client.send("orders", b"confirmed by a")
    await client.close()

    await a.stop(signal.SIGKILL)
    await b.wait_for(r"node b: LIVE, epoch 2", SLACK, since=0)
    await b.wait_started(SLACK)
    seen["a"].append(_sequence(a, "a"))
    seen["b"].append(_sequence(b, "b"))
    client = await connect(reactor, b.core_url)
    await client.send("orders", b"confirmed by b")
    await client.close()

    a_document = quorum_node("a", "replication-primary", a_port, b_port, voters)
    a = nodes(a_document, name="a")
    await management_port(a, "a")
    await a.wait_for(r"replica: in sync with b", SLACK)
    refused = await a.wait_for(r"node a: not taking over: (.*)", SLACK, since=0)
    assert "not asked" in refused.group(1) or "granted" in refused.group(1), refused.group(0)
    assert "node a: LIVE" not in a.output
    shown = await ha_status(a, capsys)
    assert shown["state"] == "BACKUP", shown
    seen["a"].append(_sequence(a, "a"))

    await b.stop(signal.SIGKILL)
    await a.wait_for(r"node a: LIVE, epoch 3", SLACK, since=0)
    await a.wait_started(SLACK)
    seen["a"].append(_sequence(a, "a"))
    assert seen == {"a": [1, 1, 2, 3], "b": [1, 2]}, seen

    reader = await connect(reactor, a.core_url)
    consumer = await reader.consumer("orders")
    for body in (b"confirmed by a", b"confirmed by b"):
        message = await consumer.receive()
        assert message.body == body
        message.ack()
    await reader.close()


@pytest_twisted.ensureDeferred
async def test_a_live_node_that_goes_on_alone_leaves_its_old_backup_unable_to_take_over(
    nodes, capsys
):
    """b paused (SIGSTOP): a drops it after its connection TTL, asks the voters and goes on
    alone as sequence 2, confirming a send without b; a killed, b resumed: b's copy is at
    1, the voters refuse it sequence 2, and b never serves what it does not hold."""
    _, voters = await _voters(nodes)
    a_port, b_port = free_port(), free_port()
    on_failure = {"vote-on-replication-failure": True}
    a_document = quorum_node("a", "replication-primary", a_port, b_port, voters, **on_failure)
    a_document["acceptor"][0]["connection-ttl"] = "2s"
    a = nodes(a_document, name="a")
    await a.wait_for(r"node a: LIVE, epoch 1", SLACK)
    await a.wait_started(SLACK)
    b_document = quorum_node("b", "replication-backup", b_port, a_port, voters, **on_failure)
    b = nodes(b_document, name="b")
    await management_port(b, "b")
    await b.wait_for(r"replica: in sync with a", SLACK)
    await a.wait_for(r"replication: b/\w+ is in sync", SLACK, since=0)

    os.kill(b.pid, signal.SIGSTOP)
    try:
        client = await connect(reactor, a.core_url)
        await client.send("orders", b"confirmed by a alone")  # once a went on without b
        await client.close()
        assert "node a: live without its backup as sequence 2" in a.output
        await a.stop(signal.SIGKILL)
    finally:
        os.kill(b.pid, signal.SIGCONT)
    await b.wait_for(r"node b: not taking over: .*sequence 2 is not above 2", SLACK)
    shown = await ha_status(b, capsys)
    assert shown["state"] == "BACKUP", shown
    assert "node b: LIVE" not in b.output
    b.started.addErrback(lambda _: None)  # it never serves: its start never finished
