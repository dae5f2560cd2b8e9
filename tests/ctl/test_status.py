"""``txbridge ctl status``: the status schema, the table for a person, and the command
against a served management API (in a worker thread, and once as its own process)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import attrs
import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.internet.utils import getProcessOutputAndValue
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from bridge.ctl.main import main
from bridge.ctl.status import (
    AddressStatus,
    DrainQueueStatus,
    DrainStatus,
    HaStatus,
    NodeStatus,
    QueueStatus,
    ReplicationView,
    Status,
    StatusFormatError,
    VoteView,
    format_drain,
    format_duration,
    format_ha,
    format_status,
)
from tests.ctl.test_management import NODE_ID, Served, fill
from tests.processes import ROOT


def queue(name: str, address: str, depth: int, in_flight: int, consumers: int) -> QueueStatus:
    return QueueStatus(
        name=name,
        address=address,
        durable=True,
        depth=depth,
        waiting=depth - in_flight,
        in_flight=in_flight,
        consumers=consumers,
        messages_added=depth,
        messages_acknowledged=0,
        messages_dropped=0,
    )


SAMPLE = Status(
    node=NodeStatus(name="a", id="7f3a", uptime_seconds=3723.9, connections=1),
    addresses=(
        AddressStatus(
            "orders",
            "anycast",
            ("orders",),
            memory_bytes=2048,
            max_size_bytes=-1,
            address_full_policy="PAGE",
            full=False,
            paged_messages=0,
            paged_bytes=0,
            messages_paged=0,
            messages_dropped=0,
            sends_refused=0,
        ),
    ),
    queues=(
        queue("orders", "orders", 12345, 10, 2),
        queue("news.archive", "news", 0, 0, 0),
    ),
    memory_bytes=2048,
    global_max_size=64 * 1024 * 1024,
    paged_bytes=0,
    producers_blocked=0,
)


def test_a_person_reads_a_node_line_and_an_aligned_table():
    assert format_status(SAMPLE) == (
        "node a (id 7f3a), up 1h 2m 3s, 1 connection\n"
        "QUEUE         ADDRESS  DEPTH  IN FLIGHT  CONSUMERS\n"
        "orders        orders   12345         10          2\n"
        "news.archive  news         0          0          0"
    )


def test_a_node_without_queues_says_so():
    empty = Status(SAMPLE.node, (), (), 0, -1, 0, 0)
    assert format_status(empty).splitlines()[1] == "no queues"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.9, "59s"), (60, "1m 0s"), (3600, "1h 0m 0s"), (93784.2, "1d 2h 3m 4s")],
)
def test_durations_in_whole_seconds(seconds, text):
    assert format_duration(seconds) == text


def test_the_document_reads_back_what_it_wrote_and_ignores_new_keys():
    document = SAMPLE.to_json()
    document["queues"][0]["added_in_a_newer_node"] = 1
    assert Status.from_json(json.loads(json.dumps(document))) == SAMPLE


def _broken(change: Any) -> dict[str, Any]:
    document = SAMPLE.to_json()
    change(document)
    return document


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "the document: expected an object, got an array"),
        (_broken(lambda d: d.pop("node")), "node: missing"),
        (_broken(lambda d: d["node"].update(id=None)), "node.id: expected a string, got null"),
        (
            _broken(lambda d: d["queues"][1].update(depth="3")),
            "queues[1].depth: expected an integer, got a string",
        ),
        (
            _broken(lambda d: d["queues"][0].update(depth=True)),
            "queues[0].depth: expected an integer, got a boolean",
        ),
        (
            _broken(lambda d: d["queues"][0].update(durable=1)),
            "queues[0].durable: expected a boolean, got a number",
        ),
        (_broken(lambda d: d.update(queues={})), "queues: expected an array, got an object"),
        (
            _broken(lambda d: d["addresses"][0].update(queues=[1])),
            "addresses[0].queues[0]: expected a string, got a number",
        ),
    ],
)
def test_a_document_of_the_wrong_shape_is_named_where(document, problem):
    with pytest.raises(StatusFormatError) as raised:
        Status.from_json(document)
    assert str(raised.value) == problem


def test_a_whole_number_of_seconds_is_a_number():
    document = _broken(lambda d: d["node"].update(uptime_seconds=5))
    assert Status.from_json(document).node.uptime_seconds == 5


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (("--url", "127.0.0.1:8161"), "expected http://HOST:PORT, got '127.0.0.1:8161'"),
        (
            ("--url", "http://h:1", "--timeout", "0"),
            "expected a number of seconds above 0, got '0'",
        ),
    ],
)
def test_options_are_checked_before_anything_is_asked(options, problem, capsys):
    with pytest.raises(SystemExit) as raised:
        main(["ctl", *options, "status"])
    assert raised.value.code == 2
    assert problem in capsys.readouterr().err


async def ctl(*argv: str) -> int:
    """Run ``txbridge ctl ...`` in a worker thread while the reactor serves."""
    return await deferToThread(main, ["ctl", *argv])


@pytest_twisted.ensureDeferred
async def test_status_against_a_node(broker, served, capsys):
    await fill(broker)
    assert await ctl("--url", served.url, "status") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"node a (id {NODE_ID}), up 0s, 5 connections"
    assert lines[1:] == [
        "QUEUE     ADDRESS  DEPTH  IN FLIGHT  CONSUMERS",
        "news.sub  news         1          0          0",
        "orders    orders       1          1          1",
    ]
    assert await ctl("--url", served.url + "/", "status", "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert [q["name"] for q in document["queues"]] == ["news.sub", "orders"]
    assert Status.from_json(document).queues[1].messages_acknowledged == 1


@pytest_twisted.ensureDeferred
async def test_credentials_are_sent_and_refusals_named(secured, capsys):
    prefix = f"txbridge ctl status: {secured.url}: "
    assert await ctl("--url", secured.url, "status") == 2
    assert capsys.readouterr().err == (
        prefix + "HTTP 401: credentials required (HTTP Basic) (pass --user and --password)\n"
    )
    assert await ctl("--url", secured.url, "--user", "root", "--password", "x", "status") == 2
    assert capsys.readouterr().err == prefix + "HTTP 401: authentication failed\n"
    bob = ("--user", "bob", "--password", "bob-secret")
    assert await ctl("--url", secured.url, *bob, "status") == 2
    assert capsys.readouterr().err == (
        prefix + "HTTP 403: user 'bob' lacks permission 'manage' on address 'txbridge.management'\n"
    )
    assert await ctl("--url", secured.url, "--user", "root", "status") == 2
    assert capsys.readouterr().err == (
        prefix + "--user needs --password (stdin is not a terminal to ask on)\n"
    )
    root = ("--user", "root", "--password", "root-secret")
    assert await ctl("--url", secured.url, *root, "status") == 0
    assert capsys.readouterr().out.startswith("node a ")


class Answers(Resource):
    """Something that is not a txbridge node: the same body at every path."""

    isLeaf = True

    def __init__(self, body: bytes) -> None:
        Resource.__init__(self)
        self.body = body

    def render_GET(self, request: Request) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return self.body


async def nobody_listening() -> str:
    """The URL of a loopback port nobody listens on (it was ours a moment ago)."""
    port = reactor.listenTCP(0, Site(Answers(b"")), interface="127.0.0.1")
    url = f"http://127.0.0.1:{port.getHost().port}"
    await port.stopListening()
    return url


@pytest_twisted.ensureDeferred
async def test_a_node_not_listening_is_one_line(capsys):
    url = await nobody_listening()
    assert await ctl("--url", url, "status") == 2
    assert capsys.readouterr().err == (
        f"txbridge ctl status: {url}: cannot connect: Connection refused\n"
    )


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            b"<html>hello</html>",
            "the answer is not JSON (Expecting value: line 1 column 1 (char 0))",
        ),
        (b'{"node": {"name": "a"}}', "the answer is not a txbridge status: node.id: missing"),
        (
            b"[1, 2]",
            "the answer is not a txbridge status: the document: expected an object, got an array",
        ),
    ],
)
@pytest_twisted.ensureDeferred
async def test_something_else_answering_is_named(body, problem, capsys):
    port = reactor.listenTCP(0, Site(Answers(body)), interface="127.0.0.1")
    url = f"http://127.0.0.1:{port.getHost().port}"
    try:
        assert await ctl("--url", url, "status") == 2
    finally:
        await port.stopListening()
    assert capsys.readouterr().err == f"txbridge ctl status: {url}: {problem}\n"


async def txbridge(*argv: str) -> tuple[bytes, bytes, int]:
    """``txbridge ARGV`` as its own process, as an operator runs it."""
    return await getProcessOutputAndValue(
        sys.executable, ["-m", "bridge.ctl.main", *argv], env=dict(os.environ), path=str(ROOT)
    )


@pytest_twisted.ensureDeferred
async def test_the_command_as_a_process(broker, served: Served):
    await fill(broker)
    out, err, code = await txbridge("ctl", "--url", served.url, "status")
    assert (code, err) == (0, b"")
    assert out.decode().splitlines()[-1] == "orders    orders       1          1          1"
    url = await nobody_listening()
    out, err, code = await txbridge("ctl", "--url", url, "status")
    assert (code, out) == (2, b"")
    assert err.decode() == f"txbridge ctl status: {url}: cannot connect: Connection refused\n"


def test_a_person_reads_the_ha_part_and_the_skew_above_its_limit():
    ha = HaStatus(
        state="LIVE",
        policy="shared-store-primary",
        live="a",
        epoch=3,
        lease_expires_ms=1_795_000_005_000,
        lease_left_ms=4200,
        clock_skew_ms=-1500,
        max_clock_skew_ms=1000,
        reason="no renewal of the lease before the deadline",
        backups=("b", "c"),
    )
    assert format_ha(ha).splitlines() == [
        "LIVE (shared-store-primary)",
        "live: a, epoch 3, lease left 4200 ms",
        "clock skew -1500 ms (above max-clock-skew 1000 ms)",
        "backups waiting: b, c",
        "last stopped serving: no renewal of the lease before the deadline",
    ]
    with_ha = Status(SAMPLE.node, (), (), 0, -1, 0, 0, ha=ha)
    assert Status.from_json(json.loads(json.dumps(with_ha.to_json()))) == with_ha
    assert Status.from_json(SAMPLE.to_json()).ha is None


def test_a_person_reads_the_last_quorum_vote():
    vote = VoteView("still-live", 2, False, 1, 2, 3, "1 of 3 voters granted, 2 needed", 4.25)
    ha = HaStatus(
        state="BACKUP",
        policy="replication-primary",
        live="",
        epoch=2,
        lease_expires_ms=0,
        lease_left_ms=0,
        clock_skew_ms=0,
        max_clock_skew_ms=1000,
        reason="lost the quorum vote without its backup: 1 of 3 voters granted, 2 needed",
        last_vote=vote,
    )
    assert format_ha(ha).splitlines()[4:6] == [
        "last stopped serving: lost the quorum vote without its backup: 1 of 3 voters "
        "granted, 2 needed",
        "last vote (still-live, sequence 2, 4.2 s ago): lost, 1 of 3 granted, 2 needed: "
        "1 of 3 voters granted, 2 needed",
    ]
    with_ha = Status(SAMPLE.node, (), (), 0, -1, 0, 0, ha=ha)
    assert Status.from_json(json.loads(json.dumps(with_ha.to_json()))) == with_ha


def test_a_person_reads_the_replication_and_drain_lines():
    ha = HaStatus("LIVE", "replication-primary", "a", 1, 0, 5000, 0, 1000, "")
    live = ReplicationView("live", "in-sync", "b/run", 3, 0, 4096, 1.5, "", "failover", 0.75)
    backup = ReplicationView("backup", "syncing", "", 0, 12, 0, None, "copying the store")
    assert format_ha(attrs.evolve(ha, replication=live)).splitlines()[4:] == [
        "replication to b/run: in-sync, 3 batches unacknowledged, 4096 bytes copied, "
        "last copy 1.50 s",
        "last failover: live 0.75 s after the link to the live node dropped",
    ]
    assert format_ha(attrs.evolve(ha, replication=backup)).splitlines()[4:] == [
        "replica of no live node: syncing (copying the store), batch 12 applied",
    ]
    drain = DrainStatus("DRAINING", "b", "", 1390, 412, (DrainQueueStatus("orders", 1390, 412),))
    assert format_drain(drain) == "DRAINING to b: 412 of 1390 message(s) left in 1 queue(s)"
    assert format_drain(attrs.evolve(drain, target="")) == (
        "DRAINING to (finding the target): 412 of 1390 message(s) left in 1 queue(s)"
    )
    failed = attrs.evolve(drain, state="FAILED", reason="no member to drain to")
    assert format_drain(failed) == "drain FAILED: no member to drain to"


@pytest_twisted.ensureDeferred
async def test_ha_status_of_a_node_without_ha_says_so(broker, served, capsys):
    assert await ctl("--url", served.url, "ha", "status") == 2
    assert capsys.readouterr().err == (
        f"txbridge ctl ha status: {served.url}: the node has no [ha]\n"
    )
