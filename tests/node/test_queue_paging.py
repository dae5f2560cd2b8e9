"""A queue with paged entries, sans-IO: it asks its pager for bodies in order, a batch at
a time, delivers nothing past a paged entry, and counts its memory; a consumer held by a
large delivery takes nothing else."""

from __future__ import annotations

from bridge.message import Message
from bridge.node.queue import PAGE_IN_BYTES, STORED, TRANSIENT, Delivery, Entry, Queue


def message(n: int, size: int = 100) -> Message:
    return Message(n, "q", False, {}, b"%0*d" % (size, n))


class Pager:
    """Records the pager's requests; ``answer`` reads them back like the store would."""

    def __init__(self) -> None:
        self.requests: list[tuple[Queue, list[Entry]]] = []

    def __call__(self, queue: Queue, entries: list[Entry]) -> None:
        self.requests.append((queue, entries))

    def answer(self) -> list[Entry]:
        queue, entries = self.requests.pop(0)
        return queue.paged_in(entries, {e.message.id: message(e.message.id) for e in entries})


def paged_queue(pager: Pager) -> Queue:
    queue = Queue("q", "q", pager=pager)
    for n in range(1, 4):
        queue.add(message(n))
    for n in range(4, 8):
        queue.add_paged(message(n).stub(), STORED if n % 2 else TRANSIENT, message(n).size)
    return queue


def test_a_paged_entry_is_read_back_before_anything_behind_it_is_delivered() -> None:
    pager = Pager()
    queue = paged_queue(pager)
    queue.add(message(8))  # in memory, behind the paged ones (a commit can do that)
    assert queue.depth == 8 and queue.paged == 4 and queue.waiting == 8
    delivered: list[Delivery] = []
    queue.add_consumer(1, delivered.append)
    assert [d.message.id for d in delivered] == [1, 2, 3]
    assert len(pager.requests) == 1
    _, batch = pager.requests[0]
    assert [e.message.id for e in batch] == [4, 5, 6, 7]
    assert [e.paged for e in batch] == [TRANSIENT, STORED, TRANSIENT, STORED]
    taken = pager.answer()
    assert [e.message.id for e in taken] == [4, 5, 6, 7]
    assert [d.message.id for d in delivered] == list(range(1, 9))
    assert delivered[3].message.body == message(4).body
    assert queue.paged == 0 and queue.memory.size == sum(message(n).size for n in range(1, 9))


def test_page_in_waits_for_a_consumer_and_reads_a_bounded_batch() -> None:
    pager = Pager()
    queue = Queue("q", "q", pager=pager)
    big = PAGE_IN_BYTES // 4
    for n in range(1, 11):
        queue.add_paged(message(n, big).stub(), STORED, message(n, big).size)
    assert pager.requests == []  # nobody to deliver to
    queue.add_consumer(1, lambda _: None, credits=0)
    [(_, batch)] = pager.requests
    assert len(batch) == 3  # 1 MiB at a time: three entries of just over 1/4 MiB
    queue.add_paged(message(11).stub(), STORED, message(11).size)
    assert len(pager.requests) == 1  # one read at a time


def test_a_failed_read_is_retried_at_the_next_dispatch() -> None:
    pager = Pager()
    queue = paged_queue(pager)
    queue.add_consumer(1, lambda _: None)
    pager.requests.clear()
    queue.page_in_failed()
    queue.set_ready(1, True)
    assert len(pager.requests) == 1


def test_a_cleared_queue_ignores_a_late_read_and_releases_its_memory() -> None:
    pager = Pager()
    queue = paged_queue(pager)
    queue.add_consumer(1, lambda _: None)
    queue.memory.paged(0)  # the broker counted the four pages; pretend the same
    entries = queue.clear()
    assert len(entries) == 7 and queue.memory.size == 0
    assert pager.answer() == []


def test_a_held_consumer_takes_nothing_and_spends_chunk_credits() -> None:
    queue = Queue("q", "q")
    delivered: list[Delivery] = []
    queue.add_consumer(1, delivered.append, credits=1000)
    queue.hold(1, True)
    queue.add(message(1))
    assert delivered == []
    queue.hold(1, False)
    assert [d.message.id for d in delivered] == [1]
    assert queue.spend(1, 700) is True
    assert queue.spend(1, 300) is False and not queue.has_credit(1)
    queue.add_consumer(2, lambda _: None)
    assert queue.spend(2, 10**9) is True and queue.has_credit(2)
