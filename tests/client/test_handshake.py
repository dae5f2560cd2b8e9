"""The session's connection life cycle: CONNECT first, CONNECTED or a refused login, and
what breaks the rules (sans-IO: packets in, packets out)."""

from __future__ import annotations

import pytest

from bridge.client.errors import AuthenticationFailed, ClientClosed, NodeProtocolError
from bridge.client.events import LoginRefused, Ready
from bridge.client.session import ClientSession
from bridge.protocol import (
    FRAME_SIZE_UNSTATED,
    PROTOCOL_VERSION,
    ClusterConnect,
    Connect,
    Connected,
    ErrorCode,
    Failed,
    Ok,
    Routing,
    Send,
    SendConfirmed,
)
from tests.client.sansio import Driver, Outcomes, message, ready


def test_connect_goes_first_and_connected_makes_the_session_ready():
    session = ClientSession(
        client_id="app", user="alice", password="secret", confirmation_window_size=4096
    )
    driver = Driver(session)
    assert not session.is_ready
    session.connection_made()
    assert driver.sent() == [
        ClusterConnect(PROTOCOL_VERSION, "app", "alice", "secret", 4096, FRAME_SIZE_UNSTATED, "")
    ]
    assert not session.is_writable
    [event] = driver.feed(Connected("node-a", "id-a", 1, 65536))
    assert event == Ready("node-a", "id-a", 65536, reconnected=False)
    assert session.is_ready and session.is_writable
    assert (session.node_name, session.node_id) == ("node-a", "id-a")


def test_sends_made_before_connected_wait_for_it():
    driver = Driver(ClientSession(client_id="app"))
    driver.session.connection_made()
    driver.session.send(message())
    assert [type(p) for p in driver.sent()] == [ClusterConnect]
    driver.feed(Connected("n", "i", 1, -1))
    assert [type(p) for p in driver.sent()] == [Send]


def test_a_refused_login_closes_the_session_with_the_nodes_words():
    driver = Driver(ClientSession(client_id="app", user="mallory", password="guess"))
    driver.session.connection_made()
    driver.sent()
    outcomes = Outcomes()
    driver.session.send(message(), callback=outcomes("send"))
    event, _ = driver.feed(Failed(0, ErrorCode.AUTHENTICATION, "bad user name or password"))
    assert isinstance(event, LoginRefused)
    assert isinstance(event.error, AuthenticationFailed)
    assert str(event.error) == (
        "login as 'mallory' refused (AUTHENTICATION): bad user name or password"
    )
    assert outcomes.heard["send"] is event.error
    with pytest.raises(ClientClosed):
        driver.session.send(message())
    driver.session.connection_lost()  # the node hangs up afterwards: nothing more happens
    assert driver.events() == []


@pytest.mark.parametrize(
    ("packet", "words"),
    [
        (Ok(1), "OK before CONNECTED"),
        (SendConfirmed(0), "SEND_CONFIRMED before CONNECTED"),
        (Connect(1, "x", None, None, 1), "CONNECT, a client -> node packet"),
    ],
)
def test_packets_before_connected_break_the_rules(packet, words):
    driver = Driver(ClientSession(client_id="app"))
    driver.session.connection_made()
    with pytest.raises(NodeProtocolError, match=words):
        driver.feed(packet)


def test_a_second_connected_breaks_the_rules():
    driver = ready()
    with pytest.raises(NodeProtocolError, match="CONNECTED when the session did not expect"):
        driver.feed(Connected("n", "i", 1, -1))


def test_a_refusal_with_request_id_0_after_connected_breaks_the_rules():
    driver = ready()
    with pytest.raises(NodeProtocolError, match="FAILED when the session did not expect"):
        driver.feed(Failed(0, ErrorCode.AUTHENTICATION, "late"))


def test_a_malformed_frame_is_a_protocol_error_naming_the_field():
    driver = ready()
    with pytest.raises(NodeProtocolError, match="SEND_CONFIRMED"):
        driver.session.receive_frame(65, b"\x00")


def test_an_answer_to_a_request_never_made_breaks_the_rules():
    driver = ready()
    with pytest.raises(NodeProtocolError, match="answered request 7, which it was not sent"):
        driver.feed(Ok(7))


def test_window_sizes_are_checked():
    with pytest.raises(ValueError, match="confirmation-window-size"):
        ClientSession(client_id="x", confirmation_window_size=0)
    with pytest.raises(ValueError, match="consumer-window-size"):
        ready().session.open_consumer("q", window_size=-2)


def test_close_fails_what_is_pending_and_refuses_more():
    driver = ready()
    outcomes = Outcomes()
    driver.session.send(message(), callback=outcomes("send"))
    driver.session.create_queue(
        "q", "a", routing=Routing.ANYCAST, durable=True, filter=None, callback=outcomes("queue")
    )
    driver.session.close(ClientClosed("the client was closed"))
    driver.events()
    assert all(isinstance(e, ClientClosed) for e in outcomes.heard.values())
    assert set(outcomes.heard) == {"send", "queue"}
    assert driver.sent() == []
