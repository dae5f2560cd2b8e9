"""One STOMP connection's session: frames in, calls of the node's session layer
(``bridge.node.session`` and its neighbours), frames out.

Sans-IO: the session is handed parsed events and writability changes, and answers through
an :class:`IStompTransport` (send a frame, close, pause or resume reading, heart-beats).
docs/stomp.md describes what a client sees; the choices in short:

- Versions 1.0 to 1.2, the highest both sides speak. CONNECT's login and passcode, and a
  TLS client certificate, go to the SecurityStore; every SEND, SUBSCRIBE, ACK and NACK is
  checked against the subject's permissions.
- Bad input (a malformed frame, a refused operation, a wrong header) is an ERROR frame
  whose ``message`` header says what and whose body says why, then the connection closes,
  as the specification asks. Nothing else on the node is affected.
- The session keeps the frame dispatch, the connection's life (CONNECT, its login,
  DISCONNECT, ERRORs) and its transactions. SENDs and the RECEIPTs, in the order of the
  frames, are ``bridge.heads.stomp.publishing``'s; SUBSCRIBE, UNSUBSCRIBE, ACK, NACK and
  the MESSAGEs ``bridge.heads.stomp.subscribing``'s (a SUBSCRIBE's receipt goes before
  any of its messages). Their bound methods are the handlers: no call in between.
- While a step waits on the node (a login, a durable queue being stored) the session
  stops reading, so frames are handled in order and nothing piles up.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from bridge.heads.stomp.frames import (
    BodyChunk,
    Command,
    Event,
    Frame,
    FrameError,
    HeartBeat,
    LargeFrame,
    Version,
)
from bridge.heads.stomp.headers import SERVER, VERSIONS, StompError, heart_beat, negotiate
from bridge.heads.stomp.interfaces import IStompTransport
from bridge.heads.stomp.publishing import Publisher, StompTransaction, open_transaction
from bridge.heads.stomp.settings import StompSettings
from bridge.heads.stomp.subscribing import Subscriber
from bridge.heads.stomp.wire import Wire
from bridge.node.addressing import Addressing
from bridge.node.broker import Broker
from bridge.node.give_back import give_back
from bridge.node.local import LocalTransactions
from bridge.node.session import ServerSession, SessionState
from security import SecurityStore
from security.auth import SecurityAuth
from security.subject import Subject

# Enum members read on every frame, kept as module constants: Python 3.11 takes about
# 220 ns to read a member off its class (``SessionState.OPEN``), 45 ns to read a global.
# (CLOSING: a DISCONNECT or an ERROR; nothing more is read, receipts still go out.)
_LIVE = (SessionState.OPEN, SessionState.CONNECTED)
_ENDING = (SessionState.CLOSING, SessionState.CLOSED)
_CONNECTING = (Command.CONNECT, Command.STOMP)
_SEND = Command.SEND
_AWAITING_CONNECT = SessionState.CONNECTED


Authenticate = Callable[[SecurityAuth], "Deferred[Subject]"]


class StompSession:
    """The node's side of one STOMP connection."""

    def __init__(
        self,
        broker: Broker,
        security: SecurityStore,
        transport: IStompTransport,
        *,
        clock: IReactorTime,
        authenticate: Authenticate,
        settings: StompSettings | None = None,
    ) -> None:
        self._transport = transport
        self._authenticate = authenticate
        self.settings = settings or StompSettings()
        self.version: Version | None = None
        self.client_id: str | None = None
        self.id = uuid.uuid4().hex
        self._transactions: LocalTransactions[str, StompTransaction] = LocalTransactions(
            broker, StompTransaction
        )
        self._node = ServerSession(broker, security, clock, self)
        """The node's side of this connection: its login and what it may do."""
        self._life = self._node.life
        """Where the connection is in its life (read on every frame)."""
        self._addressing = Addressing(self._node)
        wire = self._wire = Wire(transport, self._node)
        self._emit, self._fail, self._then = wire.emit, wire.fail, wire.then
        publisher = self._publisher = Publisher(
            broker,
            self._node,
            self._addressing,
            self._transactions,
            wire,
            max_unstored=self.settings.max_unstored,
        )
        self._after = publisher.after
        subscriber = self._subscriber = Subscriber(
            self._node,
            self._addressing,
            self._transactions,
            wire,
            publisher,
            clock=clock,
            session_id=self.id,
            prefetch=self.settings.prefetch,
        )
        self._beats = (0, 0)
        """The heart-beats the client's CONNECT offers and asks for, until logged in."""
        self._handlers: dict[Command, Callable[[Frame, dict[str, str]], None]] = {
            Command.SEND: publisher.send,
            Command.SUBSCRIBE: subscriber.subscribe,
            Command.UNSUBSCRIBE: subscriber.unsubscribe,
            Command.ACK: subscriber.ack,
            Command.NACK: subscriber.nack,
            Command.BEGIN: self._begin,
            Command.COMMIT: self._commit,
            Command.ABORT: self._abort,
            Command.DISCONNECT: self._disconnect,
        }

    # -- input ----------------------------------------------------------------------------

    def event_received(self, event: Event) -> None:
        """Act on one frame or heart-beat."""
        if isinstance(event, HeartBeat) or self._life.state not in _LIVE:
            return
        headers = {} if isinstance(event, BodyChunk) else event.header_map()
        try:
            if isinstance(event, BodyChunk):
                self._publisher.body_chunk(event)
            elif isinstance(event, LargeFrame):
                self._publisher.large_frame(event, headers)
            elif event.command in _CONNECTING:
                if self._life.state is not _AWAITING_CONNECT:
                    raise StompError("already connected", f"a second {event.command} frame")
                self._connect(headers)
            elif self._life.state is _AWAITING_CONNECT:
                raise StompError(
                    "not connected", f"{event.command} before CONNECT: send CONNECT first"
                )
            else:
                command = event.command
                if command is not _SEND:
                    self._publisher.forget()
                self._handlers[command](event, headers)
        except StompError as error:
            receipt = headers.get("receipt")
            if isinstance(event, BodyChunk):
                receipt = self._publisher.large_receipt
            self._fail(error.message, error.detail, receipt)

    def read_ended(self) -> None:
        """Every whole frame of a read has been handled (or reading paused)."""
        self._publisher.forget()

    def protocol_error(self, error: FrameError) -> None:
        """The bytes from the peer are not a frame this node accepts."""
        if self._life.state not in _ENDING:
            self._fail(error.message, error.detail)

    def writability_changed(self, writable: bool) -> None:
        """Deliveries stop while the connection is not writable and go on once it is."""
        self._subscriber.writability_changed(writable)

    def close(self, reason: str) -> None:
        """The node ends the connection (shutting down): an ERROR saying why, then close."""
        if self._life.state not in _ENDING:
            self._fail("connection closed by the node", reason)

    def connection_lost(self) -> Deferred[None]:
        """Give back what the connection held: unacknowledged messages return to their
        queues (counted as delivered), open transactions roll back, the queues of its
        non-durable topic subscriptions go. Fires once that is stored."""
        self._node.lost()  # a SEND held for room is dropped with its connection
        consumers = self._subscriber.close()
        self._publisher.close()
        self._handlers.clear()  # (its bound methods refer back to the session)
        return Deferred.fromCoroutine(
            give_back(self._transactions, consumers, self._addressing, "a closed STOMP session")
        )

    # -- connecting -----------------------------------------------------------------------

    def _connect(self, headers: dict[str, str]) -> None:
        version = negotiate(headers.get("accept-version"))
        if version is None:
            self._emit(
                Frame(
                    Command.ERROR,
                    (
                        ("version", ",".join(v.value for v in reversed(VERSIONS))),
                        ("message", "unsupported version"),
                        ("content-type", "text/plain"),
                    ),
                    f"this node speaks STOMP {', '.join(reversed(VERSIONS))}; the client "
                    f"accepts {headers.get('accept-version')!r}".encode(),
                )
            )
            self._wire.closing()
            return
        send, receive = heart_beat(headers.get("heart-beat", "0,0"))
        self.version = version
        self.client_id = headers.get("client-id") or None
        self._subscriber.connected(version, self.client_id)
        auth = SecurityAuth(
            user=headers.get("login"),
            password=headers.get("passcode"),
            peer_certificates=tuple(self._transport.peer_certificates()),
            remote_address=self._transport.peer,
            protocol="stomp",
        )
        self._beats = (send, receive)
        login = self._authenticate(auth)
        self._node.log_in(login)
        self._then(login, _nothing, None)  # (reading waits for the answer)

    @property
    def subject(self) -> Subject | None:
        """Who logged in on the connection (None until then)."""
        return self._node.subject

    def logged_in(self, subject: Subject) -> None:
        client_send, client_receive = self._beats
        ours = round(self.settings.heart_beat * 1000) if self.settings.heart_beat else 0
        send_every = max(ours, client_receive) / 1000 if ours and client_receive else None
        expect_every = max(ours, client_send) / 1000 if ours and client_send else None
        silence: float | None = None
        if expect_every is not None:
            silence = max(self.settings.ttl or 0.0, 2 * expect_every)
        self._transport.set_heart_beats(send_every, silence)
        assert self.version is not None
        self._emit(
            Frame(
                Command.CONNECTED,
                (
                    ("version", self.version.value),
                    # Nothing either way where the client offers or wants none.
                    ("heart-beat", f"{ours if client_receive else 0},{ours if client_send else 0}"),
                    ("server", SERVER),
                    ("session", self.id),
                ),
            )
        )

    def login_refused(self, reason: str) -> None:
        self._fail("authentication failed", reason)

    # -- transactions ---------------------------------------------------------------------

    def _transaction_name(self, command: Command, headers: dict[str, str]) -> str:
        name = headers.get("transaction")
        if name is None:
            raise StompError("missing header", f"{command} needs a 'transaction' header")
        return name

    def _begin(self, frame: Frame, headers: dict[str, str]) -> None:
        name = self._transaction_name(Command.BEGIN, headers)
        if not self._transactions.begin(name):
            raise StompError("transaction in use", f"transaction {name!r} is already open")
        self._after(None, headers.get("receipt"))

    def _end(self, command: Command, headers: dict[str, str]) -> StompTransaction:
        name = self._transaction_name(command, headers)
        tx = open_transaction(self._transactions, name)
        assert tx is not None
        self._transactions.end(name)
        return tx

    def _commit(self, frame: Frame, headers: dict[str, str]) -> None:
        tx = self._end(Command.COMMIT, headers)
        committing = self._transactions.commit(tx)
        self._publisher.after_each(committing, [*tx.receipts, headers.get("receipt")])

    def _abort(self, frame: Frame, headers: dict[str, str]) -> None:
        """Roll back; the receipts of its SENDs go too (each frame was handled, as the
        client asked: the ABORT undid them), then the ABORT's."""
        tx = self._end(Command.ABORT, headers)
        rolling_back = self._transactions.rollback(tx)
        self._publisher.after_each(rolling_back, [*tx.receipts, headers.get("receipt")])

    def _disconnect(self, frame: Frame, headers: dict[str, str]) -> None:
        """Answer the receipt once every earlier frame's effect is stored, then close."""
        self._node.close()
        self._publisher.goodbye(headers.get("receipt"))


def _nothing(result: object) -> None:
    """What reading waits for is done."""
