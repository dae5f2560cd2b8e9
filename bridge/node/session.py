"""The node's side of one logged-in connection, whatever protocol it speaks.

Every protocol head asks the node the same things for a client: may this subject do that
on this address; may it use an address that does not exist yet (created on first use, as
Artemis's ``auto-create-addresses``); and when must its sends wait for room on an address
full under the BLOCK policy. :class:`ServerSession` answers them once, for every head, so
no head reads the broker's addresses, their memory or the node's configuration itself.

A head translates what it hears from here into its own protocol: a refusal
(``PermissionDenied``, ``AddressNotFound``) into a core FAILED or a STOMP ERROR, a wait for
room into withheld producer credits (core) or reading paused (STOMP).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
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


def refusal(failure: Failure) -> str:
    """What a client is told of a failed login: the ``AuthenticationFailed``'s words (the
    same whatever the cause, unless the node is busy); anything else is logged, and told
    as no more than that the login failed."""
    if failure.check(AuthenticationFailed):
        return str(failure.value)
    log.failure("a login failed unexpectedly", failure)
    return "authentication failed"


def cancel_login(login: Deferred[Subject] | None) -> None:
    """The connection went during its login: one still waiting for a hash never takes
    its turn."""
    if login is not None and not login.called:
        login.cancel()


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


class ServerSession:
    """Who is logged in on one connection, and what the node lets them do."""

    def __init__(
        self, broker: Broker, security: SecurityStore, subject: Subject, clock: IReactorTime
    ) -> None:
        self.broker = broker
        self.subject = subject
        self._security = security
        self._clock = clock
        self._room: dict[str, _RoomWait] = {}

    # -- permissions and addresses ---------------------------------------------------------

    def check(self, address: str, permission: Permission, queue: str | None = None) -> None:
        """``PermissionDenied`` unless the subject may do ``permission`` on ``address``
        (and ``queue``)."""
        self._security.check(self.subject, address, permission, queue)

    def check_create(self, address: str) -> None:
        """Using the missing address ``address`` creates it: that needs create-address
        (``PermissionDenied``), and the address's settings must allow it
        (``AddressNotFound``, saying why)."""
        self._security.check(self.subject, address, Permission.CREATE_ADDRESS, None)
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

    def close(self) -> None:
        """The connection is gone: its waits end, their callbacks never called."""
        waits, self._room = self._room, {}
        for wait in waits.values():
            if wait.call is None:
                wait.memory.cancel_wait(wait.woken)
            elif wait.call.active():
                wait.call.cancel()
