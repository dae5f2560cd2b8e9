"""One lane of a bridge: a connection to the target and a consumer of the source queue.

A bridge has ``concurrency`` lanes. Each takes a message from the queue only while its
client can send one at once to the target (the connection writable, the confirmation
window not full, producer credit left); otherwise it marks its consumer not ready and
waits on the client's writability, which the connection's writability listener and the
target's credit grants wake. Nothing polls.

A source message is acknowledged once the target confirmed the send: the confirmations
of one reactor turn become one cumulative acknowledgement. A refusal, a lost connection,
a pause or a stop closes the lane's consumer, which returns every unconfirmed message to
the queue ahead of newer ones, in order; the target's duplicate-id cache drops the resend
of any the target did have.

Connecting is ``transport.reconnect``'s: a Reconnector (Twisted's ClientService under the
bridge's retry settings) over the target URLs in turn (``transport.failover``). An
attempt is a client logged in to the target with no reconnects of its own that passed
the bridge's check of the target; the lane's connection is lost when that client closes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import IO, TYPE_CHECKING, cast

from twisted.internet.defer import CancelledError, Deferred, maybeDeferred, succeed
from twisted.internet.interfaces import (
    IAddress,
    IDelayedCall,
    IProtocol,
    IProtocolFactory,
    IStreamClientEndpoint,
    ITransport,
)
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from bridge.client.api import Client
from bridge.client.errors import ClientError, ConnectionLost, Refused
from bridge.forward.forwarded import Forwarder
from bridge.node.queue import Delivery
from transport.errors import ReconnectAttemptsExhausted
from transport.failover import FailoverEndpoint
from transport.reconnect import Reconnector
from transport.urls import URL

if TYPE_CHECKING:
    from bridge.forward.bridge import Bridge

log = Logger()

WRITABILITY, CREDITS = "writability", "credits"


class Lane:
    """A target connection and a source consumer; the bridge tells it what to do."""

    def __init__(self, bridge: Bridge, index: int) -> None:
        self._bridge = bridge
        self.index = index
        self.client: Client | None = None
        self.url: URL | None = None
        self._wanted = False
        self._taking = False
        self._reconnector: Reconnector | None = None
        self._endpoint: FailoverEndpoint | None = None
        self._retries = 0
        """The retry that is under way (0: the first attempt, or connected)."""
        self._timer: IDelayedCall | None = None
        """The wait before taking again after a refusal."""
        self._refusals = 0
        self._consumer: int | None = None
        self._pending: dict[int, int] = {}
        """Unconfirmed forwards: delivery id -> bytes."""
        self._forwarder: Forwarder | None = None
        """Builds each send for the connected target (its node id is the client's)."""
        self._ack_upto: int | None = None
        self._ack_call: IDelayedCall | None = None
        self._waiter: Deferred[None] | None = None
        self._paused_since = 0.0
        self._paused_for = WRITABILITY

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def is_up(self) -> bool:
        return self.client is not None

    # -- connecting ---------------------------------------------------------------------

    def connect(self) -> None:
        """Keep a connection to the target, through its URLs in turn, backing off as the
        bridge's retry settings say (``transport.reconnect``)."""
        self._wanted = True
        if self._reconnector is not None:
            return
        bridge = self._bridge
        self._endpoint = FailoverEndpoint([_Target(self, url) for url in bridge.config.targets])
        self._reconnector = Reconnector(
            self._endpoint,
            _LinkFactory(self),
            bridge.policy,
            bridge.clock,
            on_exhausted=self._exhausted,
            on_retry=self._retrying,
        )
        self._reconnector.start()

    def _up(self, client: Client, url: URL) -> None:
        """A target connection passed the bridge's check: forward through it."""
        self.client, self.url = client, url
        config = self._bridge.config
        self._forwarder = Forwarder(
            self._bridge.origin,
            client.node_id,
            config.forwarding_address,
            config.transformer,
            config.use_duplicate_detection,
            self._bridge.moving,
        )
        retries, self._retries = self._retries, 0
        self._bridge.lane_up(self, retries)

    def wanted(self) -> bool:
        """Whether the lane is to be connected (not stopped)."""
        return self._wanted

    def _retrying(self, retry: int, delay: float) -> None:
        if not self._wanted:
            return
        self._retries = retry
        current = 0 if self._endpoint is None else self._endpoint.current
        self._bridge.retrying(retry, self._bridge.config.targets[current], delay)

    def _exhausted(self, exhausted: ReconnectAttemptsExhausted) -> None:
        if not self._wanted:
            return
        attempts = self._bridge.policy.reconnect_attempts
        tries = "attempt" if attempts == 0 else f"{attempts} reconnect attempts"
        self._bridge.lane_fatal(f"gave up after {tries}: {exhausted.cause}")

    def _lost(self, client: Client, reason: BaseException, move_on: bool = True) -> None:
        """The connection through ``client`` is gone: give back what it did not confirm;
        the next attempt goes to the next URL."""
        if client is not self.client:
            return
        self.client = self.url = None
        self._give_back()
        if move_on and self._endpoint is not None:
            self._endpoint.failed()
        if self._wanted:
            self._bridge.lane_down(self, str(reason))

    def disconnect(self) -> Deferred[None]:
        """Stop: give the unconfirmed messages back, close the connection, retry no more."""
        self._wanted = False
        self._taking = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        returned = self._give_back()
        client, self.client, self.url = self.client, None, None
        reconnector, self._reconnector = self._reconnector, None
        if reconnector is not None:
            reconnector.stop()  # closes the connection, or ends an attempt or a wait
        if client is not None:
            client.close()
        return returned

    # -- taking -------------------------------------------------------------------------

    def take(self) -> None:
        """Consume the source queue (when connected)."""
        self._taking = True
        client = self.client
        if client is None or self._consumer is not None or self._timer is not None:
            return
        bridge = self._bridge
        consumer = self._consumer = bridge.broker.next_consumer_id()
        bridge.broker.consume(
            bridge.config.queue,
            consumer,
            partial(self._deliver, consumer),
            filter=bridge.filter,
            forwards=True,
        )

    def hold(self) -> None:
        """Take nothing more (pause, stop); what is in flight may still be confirmed."""
        self._taking = False
        if self._consumer is not None:
            self._bridge.queue.set_ready(self._consumer, False)

    def give_back(self) -> Deferred[None]:
        """Return the unconfirmed messages to the queue, in order, and stop consuming."""
        self._taking = False
        return self._give_back()

    def _give_back(self) -> Deferred[None]:
        self._cancel_wait()
        self._flush_acks()
        consumer, self._consumer = self._consumer, None
        had_pending = bool(self._pending)
        self._pending.clear()
        if had_pending:
            self._bridge.lane_settled()  # a pause or stop waiting on them need not wait
        if consumer is None:
            return succeed(None)
        # What the target did not take is no consumer's failure: no dead letters.
        queue = self._bridge.config.queue
        return self._bridge.broker.close_consumer(queue, consumer, dead_letters=False)

    def _deliver(self, consumer: int, delivery: Delivery) -> None:
        bridge = self._bridge
        client, forwarder = self.client, self._forwarder
        assert client is not None and forwarder is not None, "a closed lane's delivery"
        assert consumer == self._consumer, "a closed consumer's delivery"
        message = delivery.message
        # Delivered here before: a drain's message was delivered to a consumer, any other
        # was sent to the target, which may have delivered it before a crash lost its id.
        before = delivery.delivery_count - 1
        moved_again = before and bridge.moving and not message.durable
        sent = None if moved_again else forwarder.forward(message, before)
        if sent is None:
            # A drain moves a non-durable message delivered here before nowhere: it was
            # delivered once, and is never delivered again.
            bridge.skipped()
            done = bridge.broker.acknowledge(bridge.config.queue, consumer, delivery.delivery_id)
            done.addCallbacks(bridge.acknowledged, self._ack_failed)
            return
        file: IO[bytes] | None = None
        size = sent.size
        if sent.large is not None:
            try:
                file = bridge.broker.open_body(sent.large)  # closed once settled
            except OSError as error:
                bridge.lane_fatal(f"large message {message.id} cannot be read: {error}")
                return
            size += sent.large.size
        self._pending[delivery.delivery_id] = size
        try:
            writable = client.send_message_nowait(
                sent,
                body_file=file,
                on_settled=partial(self._settled, consumer, delivery.delivery_id, file),
            )
        except Exception as error:
            if file is not None:
                bridge.broker.close_body(file)
            bridge.lane_fatal(f"message {message.id} cannot be forwarded: {error}")
            return
        if not writable:
            self._wait(client, sent.address)

    # -- flow ---------------------------------------------------------------------------

    def _wait(self, client: Client, address: str) -> None:
        """Take nothing until the client can send to ``address`` again."""
        consumer = self._consumer
        if consumer is None or self._waiter is not None:
            return
        self._bridge.queue.set_ready(consumer, False)
        self._paused_for = WRITABILITY if not client.is_writable else CREDITS
        self._paused_since = self._bridge.clock.seconds()
        waiter = self._waiter = client.when_writable(
            None if self._paused_for == WRITABILITY else address
        )
        waiter.addCallbacks(lambda _: self._writable(client, address), _ignore)

    def _writable(self, client: Client, address: str) -> None:
        self._waiter = None
        self._account_pause()
        if not client.address_writable(address):
            self._wait(client, address)
        elif self._taking and self._consumer is not None:
            self._bridge.queue.set_ready(self._consumer, True)

    def _cancel_wait(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._account_pause()
            waiter.cancel()

    def _account_pause(self) -> None:
        self._bridge.paused(self._paused_for, self._bridge.clock.seconds() - self._paused_since)

    def paused_now(self) -> tuple[str, float] | None:
        """What the lane waits for now and since how long, if it waits."""
        if self._waiter is None:
            return None
        return self._paused_for, self._bridge.clock.seconds() - self._paused_since

    # -- confirmations ------------------------------------------------------------------

    def _settled(
        self, consumer: int, delivery_id: int, file: IO[bytes] | None, error: ClientError | None
    ) -> None:
        if file is not None:
            self._bridge.broker.close_body(file)
        if consumer != self._consumer:
            return  # given back already
        size = self._pending.pop(delivery_id, None)
        if size is None:
            return
        if error is None:
            self._refusals = 0
            self._bridge.forwarded(size)
            self._ack_upto = delivery_id
            if self._ack_call is None:
                self._ack_call = self._bridge.clock.callLater(0, self._flush_acks)
        elif isinstance(error, Refused):
            self._refused(error)
        if not self._pending:
            self._bridge.lane_settled()

    def _flush_acks(self) -> None:
        """Acknowledge, at once, every source message the target confirmed so far."""
        if self._ack_call is not None:
            if self._ack_call.active():
                self._ack_call.cancel()
            self._ack_call = None
        upto, self._ack_upto = self._ack_upto, None
        if upto is not None and self._consumer is not None:
            done = self._bridge.broker.acknowledge(
                self._bridge.config.queue, self._consumer, upto, cumulative=True
            )
            done.addCallbacks(self._bridge.acknowledged, self._ack_failed)

    def _ack_failed(self, failure: Failure) -> None:
        log.failure("bridge {name}: acknowledging the source failed", failure, name=self._name)

    def _refused(self, error: Refused) -> None:
        """The target refused a message (permission, a full address under FAIL): give
        every unconfirmed one back and take again after the back-off."""
        self._bridge.error(f"the target {self.url} refused a message: {error}")
        self._give_back()
        self._refusals += 1
        self._later(self._bridge.delay(self._refusals), self._take_again)

    def _later(self, delay: float, call: Callable[[], None]) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self._bridge.clock.callLater(delay, call)

    def _take_again(self) -> None:
        self._timer = None
        if self._taking:
            self.take()

    @property
    def _name(self) -> str:
        return self._bridge.config.name


class _Failed(Exception):
    """An attempt to reach the target failed, in the words the bridge shows."""


@implementer(IStreamClientEndpoint)
class _Target:
    """One target URL as the lane's Reconnector connects to it: an attempt is a client
    logged in to the target (one attempt, no reconnects of its own) that passed the
    bridge's check of the target; only then is the lane's connection made."""

    def __init__(self, lane: Lane, url: URL) -> None:
        self._lane = lane
        self.url = url

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        return Deferred.fromCoroutine(self._attempt(protocolFactory))

    def _failed(self, reason: str) -> _Failed:
        self._lane._bridge.error(reason)
        return _Failed(reason)

    async def _attempt(self, factory: IProtocolFactory) -> IProtocol:
        bridge = self._lane._bridge
        try:
            client = await bridge.connect_client(self.url)
        except CancelledError:
            raise
        except Exception as error:
            raise self._failed(f"cannot connect to {self.url}: {_cause(error)}") from None
        try:
            problem = await maybeDeferred(bridge.check_target, client)
        except CancelledError:
            client.close()
            raise
        except ClientError as error:
            client.close()
            reason = f"the target {self.url} refused the address query: {error}"
            raise self._failed(reason) from None
        except Exception as error:
            client.close()
            log.failure("bridge {name}: checking the target failed", name=self._name)
            raise self._failed(f"checking the target {self.url} failed: {error}") from None
        return self._checked(client, problem, factory)

    def _checked(self, client: Client, problem: str | None, factory: IProtocolFactory) -> IProtocol:
        lane = self._lane
        if not lane.wanted():
            client.close()
            raise CancelledError()
        if client.is_closed:
            raise self._failed(f"lost the connection to {self.url} while checking it")
        if problem is not None:
            client.close()
            lane._bridge.lane_fatal(problem)
            raise CancelledError()
        # The connection is the client's; nothing here reads a socket address.
        link = factory.buildProtocol(cast(IAddress, None))
        assert link is not None
        link.makeConnection(cast(ITransport, _Held(client)))
        lane._up(client, self.url)
        return self._made(client, link)

    def _made(self, client: Client, link: IProtocol) -> IProtocol:
        """The lane took the connection; it may have ended as it did (the lane stopped
        for a message it cannot forward, or the client closed)."""
        lane = self._lane
        if not lane.wanted():
            raise CancelledError()
        if client.is_closed:
            lost = f"lost the connection to {self.url} as it started"
            lane._lost(client, _Lost(lost), move_on=False)  # the failed attempt moves on
            raise _Failed(lost)
        url = self.url
        client.when_closed().addCallback(
            lambda error: link.connectionLost(
                Failure(_Lost(f"lost the connection to {url}: {_cause(error)}"))
            )
        )
        return link

    @property
    def _name(self) -> str:
        return self._lane._bridge.config.name

    def __repr__(self) -> str:
        return f"<bridge {self._name} target {self.url}>"


class _Lost(Exception):
    """Why a lane's connection ended, in the words the bridge shows."""


class _Held:
    """What ClientService takes for the transport of a lane's connection: the client,
    which it closes to stop."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def loseConnection(self) -> None:
        self._client.close()


class _Link(Protocol):
    """A lane's connection as ClientService sees it: made once the client passed the
    target's check, lost when the client closes (then the lane gives back what it had
    not confirmed), and saying so to the Reconnector (``when_lost``)."""

    def __init__(self, lane: Lane) -> None:
        self._lane = lane
        self._lost: BaseException | None = None
        self._waiters: list[Deferred[BaseException]] = []

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        lost = self._lost = reason.value if reason.value is not None else _Lost("lost")
        transport = cast(_Held, self.transport)
        self._lane._lost(transport._client, lost)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(lost)

    def when_lost(self) -> Deferred[BaseException]:
        if self._lost is not None:
            return succeed(self._lost)
        waiter: Deferred[BaseException] = Deferred()
        self._waiters.append(waiter)
        return waiter


class _LinkFactory(Factory):
    """Makes the lane's connection for ClientService."""

    def __init__(self, lane: Lane) -> None:
        self._lane = lane

    def buildProtocol(self, addr: IAddress | None) -> _Link:
        return _Link(self._lane)


def _cause(error: BaseException | None) -> str:
    """What a connection ran into. A lane's client makes one attempt (the lane retries, by
    the bridge's settings): its own reconnect policy's words would only mislead."""
    if isinstance(error, ConnectionLost) and error.cause is not None:
        return error.cause
    return str(error)


def _ignore(failure: Failure) -> None:
    failure.trap(CancelledError, ClientError)
