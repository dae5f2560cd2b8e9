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
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import IO, TYPE_CHECKING

from twisted.internet.defer import CancelledError, Deferred, maybeDeferred, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.client.api import Client
from bridge.client.errors import ClientError, Refused
from bridge.forward.forwarded import Forwarder
from bridge.node.queue import Delivery
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
        self._connecting: Deferred[Client] | None = None
        self._timer: IDelayedCall | None = None
        self._next_url = 0
        self._failures = 0
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
        bridge's retry settings say."""
        self._wanted = True
        self._failures = 0
        if self.client is None and self._connecting is None and self._timer is None:
            self._attempt()

    def _attempt(self) -> None:
        self._timer = None
        targets = self._bridge.config.targets
        url = targets[self._next_url % len(targets)]
        connecting = self._connecting = self._bridge.connect_client(url)
        connecting.addCallbacks(
            self._connected, self._not_connected, callbackArgs=(url,), errbackArgs=(url,)
        )

    def _connected(self, client: Client, url: URL) -> None:
        self._connecting = None
        if not self._wanted:
            client.close()
            return
        client.when_closed().addCallback(self._lost, client)
        checking = maybeDeferred(self._bridge.check_target, client)
        checking.addCallbacks(
            self._checked, self._check_failed, callbackArgs=(client, url), errbackArgs=(client,)
        )

    def _checked(self, problem: str | None, client: Client, url: URL) -> None:
        if not self._wanted:
            client.close()
            return
        if client.is_closed:
            self._retry(f"lost the connection to {url} while checking it")
            return
        if problem is not None:
            client.close()
            self._bridge.lane_fatal(problem)
            return
        self.client, self.url = client, url
        config = self._bridge.config
        self._forwarder = Forwarder(
            self._bridge.origin,
            client.node_id,
            config.forwarding_address,
            config.transformer,
            config.use_duplicate_detection,
        )
        self._failures = 0
        self._bridge.lane_up(self)

    def _check_failed(self, failure: Failure, client: Client) -> None:
        client.close()
        if failure.check(ClientError):
            self._retry(f"the target {client.url} refused the address query: {failure.value}")
        else:
            log.failure("bridge {name}: checking the target failed", failure, name=self._name)
            self._retry(f"checking the target {client.url} failed: {failure.value}")

    def _not_connected(self, failure: Failure, url: URL) -> None:
        self._connecting = None
        if failure.check(CancelledError):
            return
        self._retry(f"cannot connect to {url}: {failure.getErrorMessage()}")

    def _retry(self, reason: str) -> None:
        """An attempt failed: try the next URL after the back-off, or give up."""
        self._bridge.error(reason)
        if not self._wanted:
            return
        self._next_url += 1
        self._failures += 1
        attempts = self._bridge.policy.reconnect_attempts
        if 0 <= attempts < self._failures:
            tries = "attempt" if attempts == 0 else f"{attempts} reconnect attempts"
            self._bridge.lane_fatal(f"gave up after {tries}: {reason}")
            return
        self._later(self._bridge.delay(self._failures), self._attempt)

    def _later(self, delay: float, call: Callable[[], None]) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self._bridge.clock.callLater(delay, call)

    def _lost(self, error: ClientError, client: Client) -> None:
        if client is not self.client:
            return
        url = self.url
        self.client = self.url = None
        self._give_back()
        if not self._wanted:
            return
        self._bridge.lane_down(self, f"lost the connection to {url}: {error}")
        self._next_url += 1
        self._later(self._bridge.delay(1), self._attempt)

    def disconnect(self) -> Deferred[None]:
        """Stop: give the unconfirmed messages back, close the connection, retry no more."""
        self._wanted = False
        self._taking = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._connecting is not None:
            self._connecting.cancel()
        returned = self._give_back()
        client, self.client, self.url = self.client, None, None
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
            bridge.config.queue, consumer, partial(self._deliver, consumer), filter=bridge.filter
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
        sending = forwarder.forward(message)
        if sending is None:
            bridge.skipped()
            done = bridge.broker.acknowledge(bridge.config.queue, consumer, delivery.delivery_id)
            done.addErrback(self._ack_failed)
            return
        sent = sending.message
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
            client.send_nowait(
                sending.address,
                sent.body if file is None else file,
                sending.headers,
                durable=sent.durable,
                duplicate_id=sent.duplicate_id,
                on_settled=partial(self._settled, consumer, delivery.delivery_id, file),
            )
        except Exception as error:
            if file is not None:
                file.close()
            bridge.lane_fatal(f"message {message.id} cannot be forwarded: {error}")
            return
        if not client.address_writable(sending.address):
            self._wait(client, sending.address)

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
            file.close()
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
            done.addErrback(self._ack_failed)

    def _ack_failed(self, failure: Failure) -> None:
        log.failure("bridge {name}: acknowledging the source failed", failure, name=self._name)

    def _refused(self, error: Refused) -> None:
        """The target refused a message (permission, a full address under FAIL): give
        every unconfirmed one back and take again after the back-off."""
        self._bridge.error(f"the target {self.url} refused a message: {error}")
        self._give_back()
        self._refusals += 1
        self._later(self._bridge.delay(self._refusals), self._take_again)

    def _take_again(self) -> None:
        self._timer = None
        if self._taking:
            self.take()

    @property
    def _name(self) -> str:
        return self._bridge.config.name


def _ignore(failure: Failure) -> None:
    failure.trap(CancelledError, ClientError)
