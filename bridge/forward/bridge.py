"""A core bridge: its life cycle (an automat machine) over its lanes, and its counters.

States, as Artemis names them: STARTING (connecting, or reconnecting after a loss),
STARTED (every lane connected and forwarding), PAUSING and STOPPING (taking nothing
more, waiting up to ``pending-ack-timeout`` for the target to confirm what is in flight),
PAUSED (connected, taking nothing), STOPPED, and FAILED (the source queue is missing, the
target can never take the bridge's window, or the reconnect attempts ran out; the reason
is ``last_error``). When the wait of a pause or a stop ends, every message still
unconfirmed returns to the source queue, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from automat import NoTransition, TypeMachineBuilder
from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from bridge.client import AddressInfo
from bridge.client.api import Client
from bridge.config.bridges import BridgeConfig
from bridge.config.units import format_size
from bridge.forward.forwarded import Origin
from bridge.forward.lane import CREDITS, Lane
from bridge.forward.status import BridgeSnapshot, BridgeState
from bridge.node.broker import Broker, QueueNotFound
from bridge.node.queue import Queue
from bridge.selector import compile_selector
from transport.reconnect import ReconnectPolicy
from transport.urls import URL

log = Logger()

BLOCK = "BLOCK"


class BridgeStateError(Exception):
    """An operation the bridge's state does not allow (pausing a stopped bridge)."""


Connector = Callable[[URL, BridgeConfig], "Deferred[Client]"]
"""Opens one client connection to a target URL (no reconnects: the lane retries)."""


class _Inputs(Protocol):
    def start(self) -> None: ...
    def up(self) -> None: ...
    def down(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def stop(self) -> None: ...
    def drained(self) -> None: ...
    def fail(self, reason: str) -> None: ...


class Bridge:
    """One configured bridge on a node. See the module docstring."""

    def __init__(
        self,
        config: BridgeConfig,
        broker: Broker,
        origin: Origin,
        clock: IReactorTime,
        connector: Connector,
        *,
        moving: bool = False,
    ) -> None:
        self.config = config
        self.moving = moving
        """A drain's bridge (docs/ha.md, Graceful drain): a message delivered here before
        moves as a redelivery if durable, and not at all if not (delivered once only)."""
        self._empty_waiters: list[Deferred[None]] = []
        self.broker = broker
        self.origin = origin
        self.clock = clock
        self._connector = connector
        self.policy = ReconnectPolicy(
            retry_interval=config.retry_interval,
            retry_interval_multiplier=config.retry_interval_multiplier,
            max_retry_interval=config.max_retry_interval,
            reconnect_attempts=config.reconnect_attempts,
        )
        self.delay = self.policy.delay()
        self.filter = config.filter
        self.state = BridgeState.STOPPED
        self.last_error: str | None = None
        self.messages_forwarded = 0
        self.bytes_forwarded = 0
        self.messages_skipped = 0
        self.reconnects = 0
        self._paused_seconds = {"writability": 0.0, CREDITS: 0.0}
        self._lanes: list[Lane] = []
        self._queue: Queue | None = None
        self._target_address = ""
        self._drain_timer: IDelayedCall | None = None
        self._waiters: list[tuple[frozenset[BridgeState], Deferred[None]]] = []
        self._machine = _Machine(self)

    # -- operations (the manager's, and the operator's through it) ---------------------

    def start(self) -> Deferred[None]:
        """Start; fires once the bridge is STARTED, or fails if it FAILED first."""
        return self._operate("start", self._machine.start, {BridgeState.STARTED})

    def pause(self) -> Deferred[None]:
        """Pause; fires once PAUSED (what was in flight confirmed or given back)."""
        return self._operate("pause", self._machine.pause, {BridgeState.PAUSED})

    def resume(self) -> Deferred[None]:
        """Resume a paused bridge; fires once it is STARTED again."""
        return self._operate("resume", self._machine.resume, {BridgeState.STARTED})

    def stop(self) -> Deferred[None]:
        """Stop; fires once STOPPED (what was in flight confirmed or given back)."""
        return self._operate("stop", self._machine.stop, {BridgeState.STOPPED})

    def _operate(
        self, what: str, call: Callable[[], None], done: set[BridgeState]
    ) -> Deferred[None]:
        try:
            call()
        except NoTransition:
            return fail(
                BridgeStateError(f"bridge {self.config.name!r} is {self.state}: cannot {what} it")
            )
        if self.state in done:
            return succeed(None)
        if self.state is BridgeState.FAILED:
            return fail(BridgeStateError(f"bridge {self.config.name!r} FAILED: {self.last_error}"))
        waiter: Deferred[None] = Deferred()
        self._waiters.append((frozenset(done), waiter))
        return waiter

    def _set(self, state: BridgeState) -> None:
        self.state = state
        ready = [w for w in self._waiters if state in w[0] or state is BridgeState.FAILED]
        self._waiters = [w for w in self._waiters if w not in ready]
        for states, waiter in ready:
            if state in states:
                waiter.callback(None)
            else:
                waiter.errback(
                    BridgeStateError(f"bridge {self.config.name!r} FAILED: {self.last_error}")
                )

    # -- what the lanes tell ------------------------------------------------------------

    def connect_client(self, url: URL) -> Deferred[Client]:
        return self._connector(url, self.config)

    def check_target(self, client: Client) -> Deferred[str | None]:
        """Why the target can never take this bridge's messages, or None: under BLOCK an
        address holding less than the confirmation window would withhold credits while
        the bridge waits for confirmations of more than it can hold."""
        return client.address_info(self._target_address).addCallback(self._window_problem)

    def _window_problem(self, info: AddressInfo) -> str | None:
        config = self.config
        window = config.confirmation_window_size
        limit = info.max_size_bytes
        if info.address_full_policy != BLOCK or limit < 0 or window <= limit:
            return None
        return (
            f"{config.source}: {config.key}.confirmation-window-size: "
            f"{format_size(window)} is more than the target's address "
            f"{self._target_address!r} may hold under its BLOCK policy (max-size-bytes "
            f"{format_size(limit)}); a window above it could wait on confirmations the "
            "target cannot give while it withholds credits: set confirmation-window-size "
            "to at most that"
        )

    def lane_up(self, lane: Lane, retries: int) -> None:
        """``lane`` connected, after ``retries`` retries: the error it had is over."""
        if retries or self.last_error is not None:
            log.info(
                "bridge {name}: {connected} to {url}{at}; last error cleared (was: {error})",
                name=self.config.name,
                connected="reconnected" if retries else "connected",
                url=lane.url,
                at=f" at retry {retries}" if retries else "",
                retries=retries,
                error=self.last_error,
            )
        self.last_error = None
        if all(each.is_up for each in self._lanes):
            self._machine.up()

    def lane_down(self, lane: Lane, reason: str) -> None:
        self.reconnects += 1
        self.error(reason)
        self._machine.down()

    def lane_fatal(self, reason: str) -> None:
        for lane in self._lanes:
            lane.hold()
        self._machine.fail(reason)

    def lane_settled(self) -> None:
        if self._drain_timer is not None and not any(lane.pending for lane in self._lanes):
            self._machine.drained()

    def when_empty(self) -> Deferred[None]:
        """Fires once the source queue is empty and the target confirmed every message
        forwarded (checked as the bridge's acknowledgements are done)."""
        waiter: Deferred[None] = Deferred(self._empty_waiters.remove)
        self._empty_waiters.append(waiter)
        self.acknowledged()
        return waiter

    def acknowledged(self, _: object = None) -> None:
        """Acknowledgements of the source are done: wake ``when_empty`` if it is so."""
        if not self._empty_waiters or self._queue is None or self._queue.depth:
            return
        if any(lane.pending for lane in self._lanes):
            return
        waiters, self._empty_waiters = self._empty_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    def error(self, text: str) -> None:
        """Show ``text`` in the status; log it when it changed."""
        if text != self.last_error:
            log.warn("bridge {name}: {text}", name=self.config.name, text=text)
        self.last_error = text

    def retrying(self, retry: int, url: URL, delay: float) -> None:
        """A lane tries again: logged each time, with the retry's number and real wait."""
        log.info(
            "bridge {name}: retry {retry} to {url} in {delay} s",
            name=self.config.name,
            retry=retry,
            url=url,
            delay=round(delay, 3),
        )

    def forwarded(self, size: int) -> None:
        self.messages_forwarded += 1
        self.bytes_forwarded += size

    def skipped(self) -> None:
        self.messages_skipped += 1

    def paused(self, kind: str, seconds: float) -> None:
        self._paused_seconds[kind] += seconds

    @property
    def queue(self) -> Queue:
        assert self._queue is not None
        return self._queue

    # -- what the machine does ----------------------------------------------------------

    def _connect(self) -> None:
        config = self.config
        try:
            self._queue = self.broker.queue(config.queue)
        except QueueNotFound:
            self._machine.fail(
                f"{config.source}: {config.key}.queue: no queue {config.queue!r} on this node"
            )
            return
        if config.filter is not None:
            try:
                compile_selector(config.filter)
            except Exception as error:
                self._machine.fail(f"{config.source}: {config.key}.filter: {error}")
                return
        self._target_address = config.forwarding_address or self._queue.address
        self.last_error = None
        self._set(BridgeState.STARTING)
        self._lanes = [Lane(self, index) for index in range(config.concurrency)]
        for lane in self._lanes:
            lane.connect()

    def _take(self) -> None:
        self._set(BridgeState.STARTED)
        for lane in self._lanes:
            lane.take()
        self.acknowledged()  # a queue emptied before the bridge took anything

    def _drain(self, state: BridgeState) -> None:
        """Take nothing more; ``drained`` once the target confirmed what is in flight,
        or once pending-ack-timeout passed."""
        self._set(state)
        for lane in self._lanes:
            lane.hold()
        self._drain_timer = self.clock.callLater(
            self.config.pending_ack_timeout, self._machine.drained
        )
        self.lane_settled()

    def _drained(self, state: BridgeState) -> None:
        timer, self._drain_timer = self._drain_timer, None
        if timer is not None and timer.active():
            timer.cancel()
        for lane in self._lanes:
            lane.give_back()
        self._set(state)

    def _resume(self) -> None:
        self._set(BridgeState.STARTING)
        if all(lane.is_up for lane in self._lanes):
            self._machine.up()

    def _disconnect(self) -> Deferred[Any]:
        lanes, self._lanes = self._lanes, []
        return DeferredList([lane.disconnect() for lane in lanes])

    def _stopped(self) -> None:
        self._drained(BridgeState.STOPPING)
        self._disconnect()
        self._set(BridgeState.STOPPED)

    def _failed(self, reason: str) -> None:
        timer, self._drain_timer = self._drain_timer, None
        if timer is not None and timer.active():
            timer.cancel()
        self.error(reason)
        self._disconnect()
        self._set(BridgeState.FAILED)

    # -- what it shows ------------------------------------------------------------------

    def snapshot(self) -> BridgeSnapshot:
        paused = dict(self._paused_seconds)
        for lane in self._lanes:
            now = lane.paused_now()
            if now is not None:
                paused[now[0]] += now[1]
        connected = next((str(lane.url) for lane in self._lanes if lane.url is not None), None)
        config = self.config
        return BridgeSnapshot(
            name=config.name,
            state=self.state,
            queue=config.queue,
            targets=tuple(str(url) for url in config.targets),
            connected_to=connected,
            last_error=self.last_error,
            messages_forwarded=self.messages_forwarded,
            bytes_forwarded=self.bytes_forwarded,
            messages_skipped=self.messages_skipped,
            pending_confirmations=sum(lane.pending for lane in self._lanes),
            paused_writability_seconds=round(paused["writability"], 6),
            paused_credits_seconds=round(paused[CREDITS], 6),
            reconnects=self.reconnects,
            source=f"{config.source} {config.key}",
            pending_ack_timeout=config.pending_ack_timeout,
        )


# -- the life cycle (automat) -------------------------------------------------------------

_builder = TypeMachineBuilder(_Inputs, Bridge)
_stopped = _builder.state("stopped")
_starting = _builder.state("starting")
_started = _builder.state("started")
_pausing = _builder.state("pausing")
_paused = _builder.state("paused")
_stopping = _builder.state("stopping")
_failed = _builder.state("failed")


@_stopped.upon(_Inputs.start).to(_starting)
@_failed.upon(_Inputs.start).to(_starting)
def _start(inputs: _Inputs, bridge: Bridge) -> None:
    bridge._connect()


@_starting.upon(_Inputs.up).to(_started)
def _up(inputs: _Inputs, bridge: Bridge) -> None:
    bridge._take()


@_started.upon(_Inputs.down).to(_starting)
def _down(inputs: _Inputs, bridge: Bridge) -> None:
    bridge._set(BridgeState.STARTING)


@_started.upon(_Inputs.pause).to(_pausing)
def _pause(inputs: _Inputs, bridge: Bridge) -> None:
    bridge._drain(BridgeState.PAUSING)


@_starting.upon(_Inputs.pause).to(_paused)
def _pause_while_starting(inputs: _Inputs, bridge: Bridge) -> None:
    bridge._set(BridgeState.PAUSED)


@_pausing.upon(_Inputs.drained).to(_paused)
def _now_paused(inputs: _Inputs, bridge: Bridge) -> None:
    bridge._drained(BridgeState.PAUSED)


@_paused.upon(_Inputs.resume).to(_starting)
def _resume(inputs: _Inputs, bridge: Bridge) -> None:
    bridge._resume()


@_started.upon(_Inputs.stop).to(_stopping)
@_pausing.upon(_Inputs.stop).to(_stopping)
def _stop(inputs: _Inputs, bridge: Bridge) -> None:
    bridge._set(BridgeState.STOPPING)
    if bridge._drain_timer is None:
        bridge._drain(BridgeState.STOPPING)


@_starting.upon(_Inputs.stop).to(_stopped)
@_paused.upon(_Inputs.stop).to(_stopped)
@_failed.upon(_Inputs.stop).to(_stopped)
def _stop_idle(inputs: _Inputs, bridge: Bridge) -> None:
    bridge._stopped()


@_stopping.upon(_Inputs.drained).to(_stopped)
def _now_stopped(inputs: _Inputs, bridge: Bridge) -> None:
    bridge._stopped()


for _state in (_starting, _started, _pausing, _paused, _stopping):

    @_state.upon(_Inputs.fail).to(_failed)
    def _fail(inputs: _Inputs, bridge: Bridge, reason: str) -> None:
        bridge._failed(reason)


for _state in (_starting, _pausing, _paused, _stopping, _stopped, _failed):

    @_state.upon(_Inputs.down).loop()
    def _down_again(inputs: _Inputs, bridge: Bridge) -> None:
        """A lane lost its connection: it reconnects by itself; nothing else changes."""


for _state in (_started, _pausing, _paused, _stopping, _stopped, _failed):

    @_state.upon(_Inputs.up).loop()
    def _up_again(inputs: _Inputs, bridge: Bridge) -> None:
        """Lanes connected while the bridge is not starting: it takes nothing now."""


for _state in (_starting, _started, _paused, _stopped, _failed):

    @_state.upon(_Inputs.drained).loop()
    def _drained_late(inputs: _Inputs, bridge: Bridge) -> None:
        """A drain's timer or last confirmation after the drain ended."""


@_stopped.upon(_Inputs.fail).loop()
@_failed.upon(_Inputs.fail).loop()
def _fail_again(inputs: _Inputs, bridge: Bridge, reason: str) -> None:
    """A late failure of a stopped or failed bridge changes nothing."""


@_stopping.upon(_Inputs.stop).loop()
@_stopped.upon(_Inputs.stop).loop()
def _stop_again(inputs: _Inputs, bridge: Bridge) -> None:
    """Stopping twice: the first stop goes on."""


@_paused.upon(_Inputs.pause).loop()
@_pausing.upon(_Inputs.pause).loop()
def _pause_again(inputs: _Inputs, bridge: Bridge) -> None:
    """Pausing twice: the first pause goes on."""


@_started.upon(_Inputs.resume).loop()
@_starting.upon(_Inputs.resume).loop()
def _resume_again(inputs: _Inputs, bridge: Bridge) -> None:
    """Resuming a bridge that is not paused changes nothing."""


@_started.upon(_Inputs.start).loop()
@_starting.upon(_Inputs.start).loop()
def _start_again(inputs: _Inputs, bridge: Bridge) -> None:
    """Starting a started bridge changes nothing."""


_Machine = _builder.build()
