"""Fixtures for the client's Twisted tests: a node double on loopback TCP, and clients
that are closed after the test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from bridge.client.api import Client, connect
from tests.client.node_double import NodeDouble


@pytest.fixture
def node() -> Iterator[NodeDouble]:
    double = NodeDouble()
    double.url = pytest_twisted.blockon(Deferred.fromCoroutine(double.listen(reactor)))
    yield double
    pytest_twisted.blockon(Deferred.fromCoroutine(double.stop()))


class Clients:
    def __init__(self) -> None:
        self.opened: list[Client] = []

    async def __call__(self, url: str, **options: Any) -> Client:
        client = await connect(reactor, url, **options)
        self.opened.append(client)
        return client


@pytest.fixture
def clients() -> Iterator[Clients]:
    made = Clients()
    yield made
    for client in made.opened:
        pytest_twisted.blockon(client.close())
