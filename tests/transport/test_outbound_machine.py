"""The outbound queue as a state machine, checked against a model by hypothesis."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from transport.outbound import OutboundQueue

HIGH, LOW = 1000, 300


class OutboundMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.queue = OutboundQueue(HIGH, LOW)
        self.model_parts: list[bytes] = []
        self.model_in_transport = 0
        self.paused = False
        self.counter = 0
        self.sent = bytearray()
        self.expected = bytearray()
        self.announced = True
        self.flips = 0

    def _flip_at_the_marks(self, before: bool) -> None:
        """Writability changes only at the marks: off at or above high, on at or below low."""
        after = self.queue.writable
        if before and not after:
            assert self.queue.pending >= HIGH
        if after and not before:
            assert self.queue.pending <= LOW

    @rule(sizes=st.lists(st.integers(0, 600), min_size=1, max_size=3))
    def push(self, sizes):
        before = self.queue.writable
        parts = []
        for size in sizes:
            self.counter += 1
            parts.append(bytes([self.counter % 256]) * size)
        self.queue.push(parts, sum(sizes))
        self.model_parts.extend(parts)
        self.expected.extend(b"".join(parts))
        self._flip_at_the_marks(before)

    @precondition(lambda self: not self.paused)
    @rule(budget=st.integers(1, 2000))
    def flush_pass(self, budget):
        before = self.queue.writable
        self.queue.transport_producing()
        self.model_in_transport = 0
        if not self.model_parts:
            return
        taken = self.queue.take(budget)
        assert taken, "a pass always takes at least one part"
        assert sum(map(len, taken[:-1])) < budget, "only the last part may cross the budget"
        assert sum(map(len, taken)) >= budget or len(taken) == len(self.model_parts), (
            "a pass stops at the budget or when nothing is left"
        )
        assert taken == self.model_parts[: len(taken)]
        del self.model_parts[: len(taken)]
        self.model_in_transport += sum(map(len, taken))
        self.sent.extend(b"".join(taken))
        self._flip_at_the_marks(before)

    @rule()
    def transport_pauses(self):
        before = self.queue.writable
        self.queue.transport_paused_by_peer()
        self.paused = True
        self._flip_at_the_marks(before)

    @rule()
    def transport_drains(self):
        before = self.queue.writable
        self.queue.transport_resumed()
        self.paused = False
        self.model_in_transport = 0
        self._flip_at_the_marks(before)

    @rule()
    def announce(self):
        changes = self.queue.changes_to_announce()
        for change in changes:
            assert change != self.announced, "every announced change is a change"
            self.announced = change
        assert self.announced == self.queue.writable, "listeners end up current"

    @invariant()
    def pending_is_queue_plus_what_a_paused_transport_holds(self):
        queued = sum(map(len, self.model_parts))
        assert self.queue.queued == queued
        assert self.queue.pending == queued + (self.model_in_transport if self.paused else 0)

    @invariant()
    def water_marks_hold(self):
        if self.queue.pending >= HIGH:
            assert not self.queue.writable
        if self.queue.pending <= LOW:
            assert self.queue.writable

    @invariant()
    def bytes_leave_in_order(self):
        assert self.expected.startswith(self.sent)


TestOutboundMachine = OutboundMachine.TestCase
