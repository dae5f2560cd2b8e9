"""The node's side of one connection, whatever protocol it speaks.

Every protocol head asks the node the same things for a client: may this subject do that
on this address; may it use an address that does not exist yet (created on first use, as
Artemis's ``auto-create-addresses``); and when must its sends wait for room on an address
full under the BLOCK policy. :class:`ServerSession` answers them once, for every head, so
no head reads the broker's addresses, their memory or the node's configuration itself.

A head translates what it hears from here into its own protocol: a refusal
(``PermissionDenied``, ``AddressNotFound``) into a core FAILED or a STOMP ERROR, a wait for
room into withheld producer credits (core) or reading paused (STOMP).

A session is made when its connection is, and its life is an automat machine (h11 keeps
its states so): inputs are what happened, and each state says what may happen next::

    state       input         next        what it does
    connected   log_in        logging_in  waits for the login's Deferred
    logging_in  accepted      open        the head hears ``logged_in(subject)``
    logging_in  refused       closing     the head hears ``login_refused(reason)``
    (any live)  close         closing     the head said goodbye (DISCONNECT, an ERROR)
    (any)       lost          closed      a login under way is cancelled, waits end
    closing     accepted, refused         (the answer comes too late: nothing)
    closed      anything but log_in       (nothing)

The machine's data is a :class:`Life` apart from the session (the session holds the
machine, the machine its ``Life``: no cycle), and ``Life.state`` a plain attribute, which a
head reads on every frame. The head that listens is let go once the connection is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Protocol

import attrs
from automat import TypeMachineBuilder
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.config.node import AddressFullPolicy, AddressSettings, Routing
from bridge.node.broker import Broker
from bridge.node.memory import AddressMemory
from security import SecurityStore
from security.errors import AuthenticationFailed
from security.permissions import Permission
from security.subject import Subject

log = Logger()

_BLOCK = AddressFullPolicy.BLOCK


def _login_refusal(failure: Failure) -> str:
    """What a client is told of a failed login: the ``AuthenticationFailed``'s words (the
    same whatever the cause, unless the node is busy); anything else is logged, and told
    as no more than that the login failed."""
    if failure.check(AuthenticationFailed):
        return str(failure.value)
    log.failure("a login failed unexpectedly", failure)
    return "authentication failed"


class SessionState(Enum):
    """Where a session is in its life (see the module docstring's table)."""

    CONNECTED = "connected"
    LOGGING_IN = "logging in"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class ILoginListener(Protocol):
    """What a head hears of its connection's login."""

    def logged_in(self, subject: Subject) -> None:
        """The login was accepted: the session is open."""

    def login_refused(self, reason: str) -> None:
        """The login was refused, for ``reason`` (words to tell the client)."""


class _Lifecycle(Protocol):
    """The inputs of a session's machine."""

    def log_in(self, login: Deferred[Subject]) -> None: ...
    def accepted(self, subject: Subject) -> None: ...
    def refused(self, failure: Failure) -> None: ...
    def close(self) -> None: ...
    def lost(self) -> None: ...


@attrs.frozen
class AddressView:
    """What a client may learn of an address: whether it exists, whether using it would
    create it, and its routing types and settings (for a missing one, those it would be
    created with; no routing types where it would not be created)."""

    exists: bool
    auto_create: bool
    routing: frozenset[Routing]
    settings: AddressSettings


@attrs.define(eq=False)
class _RoomWait:
    """A wait for room on one address: the memory waited on, the callback it calls, the
    call on the next turn once it did."""

    memory: AddressMemory
    woken: Callable[[], None]
    call: IDelayedCall | None = None


@attrs.define(eq=False)
class Life:
    """A session's machine's data: its state, who logged in, the login under way, the
    head that listens (until the connection is lost) and the session's waits for room."""

    listener: ILoginListener | None
    room: dict[str, _RoomWait]
    state: SessionState = SessionState.CONNECTED
    subject: Subject | None = None
    login: Deferred[Subject] | None = None

    def end(self) -> None:
        """The connection is gone: see ``ServerSession.lost``."""
        self.listener = None
        login, self.login = self.login, None
        if login is not None and not login.called:
            login.cancel()
        waits = list(self.room.values())
        self.room.clear()
        for wait in waits:
            if wait.call is None:
                wait.memory.cancel_wait(wait.woken)
            elif wait.call.active():
                wait.call.cancel()


class ServerSession:
    """One connection's life on the node: who is logged in on it, and what the node lets
    them do."""

    def __init__(
        self,
        broker: Broker,
        security: SecurityStore,
        clock: IReactorTime,
        listener: ILoginListener,
    ) -> None:
        self.broker = broker
        self._security = security
        self._clock = clock
        self._room: dict[str, _RoomWait] = {}
        self.life = Life(listener, self._room)
        """Read ``life.state`` for where the session is."""
        self._lifecycle: _Lifecycle = _Machine(self.life)

    @property
    def state(self) -> SessionState:
        return self.life.state

    @property
    def subject(self) -> Subject | None:
        """Who logged in (None until then)."""
        return self.life.subject

    # -- life ------------------------------------------------------------------------------

    def log_in(self, login: Deferred[Subject]) -> None:
        """The client logs in: ``login`` fires with the subject, or fails with why not."""
        lifecycle = self._lifecycle
        lifecycle.log_in(login)
        login.addCallbacks(lifecycle.accepted, lifecycle.refused)  # (now, if it has fired)

    def close(self) -> None:
        """The head ends the connection (a DISCONNECT, an ERROR): nothing more is taken
        from the client, what is under way still answers."""
        self._lifecycle.close()

    def lost(self) -> None:
        """The connection is gone: a login under way is cancelled (it never takes its
        turn for a hash), waits for room end, their callbacks never called."""
        self._lifecycle.lost()

    # -- permissions and addresses ---------------------------------------------------------

    def check(self, address: str, permission: Permission, queue: str | None = None) -> None:
        """``PermissionDenied`` unless the subject may do ``permission`` on ``address``
        (and ``queue``)."""
        subject = self.life.subject
        assert subject is not None, "not logged in"
        self._security.check(subject, address, permission, queue)

    def check_create(self, address: str) -> None:
        """Using the missing address ``address`` creates it: that needs create-address
        (``PermissionDenied``), and the address's settings must allow it
        (``AddressNotFound``, saying why)."""
        self.check(address, Permission.CREATE_ADDRESS)
        if not self.broker.may_create_address(address):
            raise self.broker.not_creatable(address)

    def check_address(self, address: str) -> None:
        """Sending to or binding on ``address``: nothing to check if it exists, else as
        ``check_create``."""
        if not self.broker.has_address(address):
            self.check_create(address)

    def default_routing(self, address: str) -> Routing:
        """The routing an address of this name gets when it is created on first use."""
        return self.broker.config.routing_for(address)

    def describe(self, name: str) -> AddressView:
        """The address ``name`` as a client may see it; creates nothing."""
        address = self.broker.addresses.get(name)
        auto_create = self.broker.may_create_address(name)
        if address is not None:
            return AddressView(True, auto_create, address.routing_types, address.settings)
        config = self.broker.config
        routing = config.routing_types_for(name) if auto_create else frozenset()
        return AddressView(False, auto_create, routing, config.settings_for(name))

    # -- room on addresses full under BLOCK ------------------------------------------------

    def full_under_block(self, address: str) -> bool:
        """Whether sends to ``address`` must wait for room (it is full, its policy
        BLOCK)."""
        known = self.broker.addresses.get(address)
        if known is None:
            return False
        memory = known.memory
        return memory.policy is _BLOCK and memory.full

    def wait_for_room(self, address: str, ready: Callable[[], None]) -> None:
        """Call ``ready`` once ``address`` has room again, on the reactor turn after the
        room appeared (it appears inside another connection's acknowledgement, which must
        not run this one's sends). One wait per address at a time."""
        assert address not in self._room, f"already waiting for room on {address!r}"
        memory = self.broker.addresses[address].memory

        def woken() -> None:
            wait.call = self._clock.callLater(0, done)

        def done() -> None:
            del self._room[address]
            ready()

        wait = self._room[address] = _RoomWait(memory, woken)
        memory.when_room(woken)

    def waiting_for_room(self, address: str) -> bool:
        return address in self._room

    @property
    def blocked(self) -> int:
        """How many addresses this connection's sends wait on for room."""
        return len(self._room)


_builder = TypeMachineBuilder(_Lifecycle, Life)
_connected = _builder.state("connected")
_logging_in = _builder.state("logging_in")
_open = _builder.state("open")
_closing = _builder.state("closing")
_closed = _builder.state("closed")


@_connected.upon(_Lifecycle.log_in).to(_logging_in)
def _log_in(lifecycle: _Lifecycle, life: Life, login: Deferred[Subject]) -> None:
    life.state = SessionState.LOGGING_IN
    life.login = login


@_logging_in.upon(_Lifecycle.accepted).to(_open)
def _accepted(lifecycle: _Lifecycle, life: Life, subject: Subject) -> None:
    life.login = None
    life.subject = subject
    life.state = SessionState.OPEN
    assert life.listener is not None
    life.listener.logged_in(subject)


@_logging_in.upon(_Lifecycle.refused).to(_closing)
def _refused(lifecycle: _Lifecycle, life: Life, failure: Failure) -> None:
    life.login = None
    life.state = SessionState.CLOSING
    assert life.listener is not None
    life.listener.login_refused(_login_refusal(failure))


for _live in (_connected, _logging_in, _open):

    @_live.upon(_Lifecycle.close).to(_closing)
    def _close(lifecycle: _Lifecycle, life: Life) -> None:
        life.state = SessionState.CLOSING


for _state in (_connected, _logging_in, _open, _closing):

    @_state.upon(_Lifecycle.lost).to(_closed)
    def _lost(lifecycle: _Lifecycle, life: Life) -> None:
        life.state = SessionState.CLOSED
        life.end()


@_closing.upon(_Lifecycle.close).loop()
def _closing_again(lifecycle: _Lifecycle, life: Life) -> None:
    """Said goodbye already."""


for _late in (_closing, _closed):

    @_late.upon(_Lifecycle.accepted).loop()
    def _late_accepted(lifecycle: _Lifecycle, life: Life, subject: Subject) -> None:
        """The login ended after the connection did: nobody is logged in."""

    @_late.upon(_Lifecycle.refused).loop()
    def _late_refused(lifecycle: _Lifecycle, life: Life, failure: Failure) -> None:
        """The login failed (or was cancelled) after the connection ended."""


@_closed.upon(_Lifecycle.close).loop()
def _closed_close(lifecycle: _Lifecycle, life: Life) -> None:
    """Gone already."""


@_closed.upon(_Lifecycle.lost).loop()
def _closed_lost(lifecycle: _Lifecycle, life: Life) -> None:
    """Gone already."""


_Machine = _builder.build()
