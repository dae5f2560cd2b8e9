"""A blocking facade over the Twisted client, for scripts, on ``crochet``.

The reactor runs in a background thread (``crochet.setup()``, done on first ``connect``);
each call here runs the Twisted API in that thread and waits for its result, up to
``timeout`` seconds. Not for use inside a program that runs its own reactor: use
``bridge.client.api`` there.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import IO, Any, cast

import attrs
import crochet
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred

from bridge.client import api
from bridge.client.errors import ClientError
from bridge.client.events import AddressInfo
from bridge.client.session import DEFAULT_CONSUMER_WINDOW_SIZE
from bridge.message import HeaderValue
from bridge.protocol import Routing

DEFAULT_TIMEOUT = 30.0
"""Seconds a call waits for the node before raising ``TimeoutError``."""


class TimeoutError(ClientError):
    """The node did not answer within the call's timeout."""


class ProducerBlocked(TimeoutError):
    """A send could not start within the call's timeout: the address had no producer
    credit (the node withholds it while the address is full under BLOCK) or the
    confirmation window stayed full. Nothing was sent."""


def _seconds(timeout: float | None) -> float:
    """crochet waits without end on None, though its stub asks for a float."""
    return cast(float, timeout)


CANCEL_TIMEOUT = 5.0
"""Seconds a call that timed out waits for its cancellation to be done in the reactor."""


def _wait(call: Any, timeout: float | None, *args: Any, **kwargs: Any) -> Any:
    """Run ``call`` in the reactor thread and wait for its Deferred's result."""
    result = crochet.run_in_reactor(call)(*args, **kwargs)
    try:
        return result.wait(_seconds(timeout))
    except crochet.TimeoutError:
        try:
            return _cancel(result)
        except CancelledError:
            raise TimeoutError(f"no answer from the node within {timeout}s") from None


def _cancel(result: crochet.EventualResult[Any]) -> Any:
    """Cancel a call that timed out, and take its outcome: CancelledError, or what came
    in the meantime. Taken, a cancellation is no "Unhandled error in EventualResult" that
    crochet would print when the program exits."""
    result.cancel()
    try:
        return result.wait(CANCEL_TIMEOUT)
    except crochet.TimeoutError:
        raise TimeoutError(
            f"the reactor did not cancel the call within {CANCEL_TIMEOUT}s"
        ) from None


@attrs.frozen
class BlockingMessage:
    """A received message; ``body`` loads a large body into memory, ``body_file`` does not."""

    received: api.ReceivedMessage
    timeout: float | None

    @property
    def body(self) -> bytes:
        return self.received.body

    @property
    def body_file(self) -> IO[bytes]:
        return self.received.body_file

    @property
    def headers(self) -> Mapping[str, HeaderValue]:
        return self.received.headers

    @property
    def id(self) -> int:
        return self.received.id

    @property
    def address(self) -> str:
        return self.received.address

    @property
    def durable(self) -> bool:
        return self.received.durable

    @property
    def duplicate_id(self) -> bytes | None:
        return self.received.duplicate_id

    @property
    def delivery_count(self) -> int:
        """1 on the first delivery, then one more per redelivery."""
        return self.received.delivery_count

    @property
    def redelivered(self) -> bool:
        """Whether the node handed this message out before (``delivery_count`` above 1)."""
        return self.received.redelivered

    @property
    def is_large(self) -> bool:
        """Whether the body came as a large message (a file, see ``body_file``)."""
        return self.received.is_large

    def ack(self, *, cumulative: bool = False, tx: BlockingTransaction | None = None) -> None:
        """Acknowledge, and wait until the node has the acknowledgement durably."""
        _wait(
            lambda: self.received.ack_durably(
                cumulative=cumulative, tx=None if tx is None else tx.transaction
            ),
            self.timeout,
        )

    def nack(self, requeue: bool = True) -> None:
        """Refuse: back on the queue (``requeue``) or dropped."""
        _wait(self.received.nack, self.timeout, requeue)


@attrs.frozen
class BlockingConsumer:
    consumer: api.Consumer
    timeout: float | None

    def receive(self, timeout: float | None = None) -> BlockingMessage | None:
        """The next message, or None if none came within ``timeout`` seconds."""
        result = crochet.run_in_reactor(self.consumer.receive)()
        try:
            received = result.wait(_seconds(timeout))
        except crochet.TimeoutError:
            try:
                received = _cancel(result)  # a message that came just now is not lost
            except CancelledError:
                return None
        return BlockingMessage(cast(api.ReceivedMessage, received), self.timeout)

    def close(self) -> None:
        _wait(self.consumer.close, self.timeout)


@attrs.frozen
class BlockingTransaction:
    transaction: api.Transaction
    timeout: float | None

    def commit(self) -> None:
        _wait(self.transaction.commit, self.timeout)

    def rollback(self) -> None:
        _wait(self.transaction.rollback, self.timeout)


class BlockingClient:
    """The blocking client; a context manager that closes it on exit."""

    def __init__(self, client: api.Client, timeout: float | None) -> None:
        self._client = client
        self.timeout = timeout

    def send(
        self,
        address: str,
        body: api.Body,
        headers: Mapping[str, HeaderValue] | None = None,
        *,
        durable: bool = True,
        duplicate_id: bytes | None = None,
        tx: BlockingTransaction | None = None,
    ) -> None:
        """Send and wait for the node's confirmation; a file body streams as a large message.

        A send waits for producer credit first: ``ProducerBlocked`` if none came within the
        timeout (then nothing was sent)."""
        try:
            _wait(self._client.when_writable, self.timeout, address)
        except TimeoutError:
            raise ProducerBlocked(
                f"no producer credit for address {address!r} within {self.timeout}s: the "
                "address is full under the BLOCK policy, or the node does not confirm; "
                "nothing was sent"
            ) from None
        _wait(
            self._client.send,
            self.timeout,
            address,
            body,
            headers,
            durable=durable,
            duplicate_id=duplicate_id,
            tx=None if tx is None else tx.transaction,
        )

    def create_queue(
        self,
        name: str,
        address: str | None = None,
        *,
        routing: Routing = Routing.ANYCAST,
        durable: bool = True,
        filter: str | None = None,
    ) -> None:
        _wait(
            self._client.create_queue,
            self.timeout,
            name,
            address,
            routing=routing,
            durable=durable,
            filter=filter,
        )

    def delete_queue(self, name: str) -> None:
        _wait(self._client.delete_queue, self.timeout, name)

    def address_info(self, address: str) -> AddressInfo:
        """How ``address`` is set up on the node (``api.Client.address_info``)."""
        return cast(AddressInfo, _wait(self._client.address_info, self.timeout, address))

    def consumer(
        self,
        queue: str,
        *,
        filter: str | None = None,
        window_size: int = DEFAULT_CONSUMER_WINDOW_SIZE,
        browse_only: bool = False,
    ) -> BlockingConsumer:
        consumer = _wait(
            self._client.consumer,
            self.timeout,
            queue,
            filter=filter,
            window_size=window_size,
            browse_only=browse_only,
        )
        return BlockingConsumer(consumer, self.timeout)

    def begin(self) -> BlockingTransaction:
        return BlockingTransaction(_wait(self._client.begin, self.timeout), self.timeout)

    def close(self) -> None:
        _wait(self._client.close, self.timeout)

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def connect(url: str, *, timeout: float | None = DEFAULT_TIMEOUT, **options: Any) -> BlockingClient:
    """Connect and log in; ``options`` are ``bridge.client.api.connect``'s (user, password,
    client_id, tls, confirmation_window_size, min_large_message_size, reconnect ...)."""
    crochet.setup()

    def connecting() -> Deferred[api.Client]:
        return api.connect(reactor, url, **options)

    return BlockingClient(_wait(connecting, timeout), timeout)
