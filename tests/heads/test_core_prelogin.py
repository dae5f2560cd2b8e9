"""The core head with partial-frame limits, on a secured node over real sockets: before
its login succeeds a connection may send only a CONNECT's worth (a header announcing more
is refused at once, naming the limit); once logged in, frames up to max-frame-size go."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from bridge.protocol import packets as p
from tests.heads.conftest import SECURITY, Node, message
from tests.heads.test_core_handshake import error_text
from tests.security.helpers import write_users
from transport.frames import HEADER, MAGIC, VERSION
from transport.partial import PartialFrameLimits
from transport.settings import ConnectionSettings

PRELOGIN = 4 * 1024


@pytest.fixture
def guarded_node(tmp_path: Any) -> Iterator[Node]:
    write_users(tmp_path / "users.toml", {"alice": ("alice-secret", ["producers"])})
    settings = ConnectionSettings(partial_frames=PartialFrameLimits(prelogin_size=PRELOGIN))
    node = Node(tmp_path, SECURITY, settings=settings)
    running = pytest_twisted.blockon(Deferred.fromCoroutine(node.start()))
    yield running
    pytest_twisted.blockon(Deferred.fromCoroutine(running.stop()))


@pytest_twisted.ensureDeferred
async def test_before_login_a_large_frame_is_refused_at_its_header(guarded_node):
    peer = await guarded_node.peer(connect_as=None)
    header = HEADER.pack(MAGIC, VERSION, p.PacketType.CONNECT, 4 * 1024 * 1024)
    peer.connection.transport.write(header + b"x" * 1000)
    assert f"maximum frame size of {PRELOGIN} bytes" in await error_text(peer)


@pytest_twisted.ensureDeferred
async def test_once_logged_in_frames_up_to_the_max_frame_size_go(guarded_node):
    peer = await guarded_node.peer(connect_as=("alice", "alice-secret"))
    assert peer.of(p.Connected)
    body = b"m" * (256 * 1024)
    peer.send(p.Send(1, None, message("orders", body)))
    await peer.confirmed(1)
    [entry] = guarded_node.broker.queue("orders").browse()
    assert entry.message.body == body
