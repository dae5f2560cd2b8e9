"""Which failures of a client's request are the node's refusals, told as they are, and
which are faults, logged (``bridge.node.errors.refusal``)."""

from __future__ import annotations

from twisted.logger import LogLevel, globalLogPublisher
from twisted.python.failure import Failure

from bridge.node.errors import AddressFull, NodeError, refusal
from bridge.selector import SelectorError
from bridge.store.errors import StoreError


def _logged(failure: Failure) -> tuple[NodeError | None, list[LogLevel]]:
    levels: list[LogLevel] = []

    def observer(event: dict[str, object]) -> None:
        levels.append(event["log_level"])  # type: ignore[arg-type]

    globalLogPublisher.addObserver(observer)
    try:
        return refusal(failure, "a test request"), levels
    finally:
        globalLogPublisher.removeObserver(observer)


def test_a_refusal_is_told_as_it_is_and_not_logged() -> None:
    full = AddressFull("address 'a' is full")
    assert _logged(Failure(full)) == (full, [])
    selector_error = SelectorError("a ==", 3, "expected a value")
    bad, levels = _logged(Failure(selector_error))
    assert isinstance(bad, NodeError) and str(bad) == str(selector_error) and levels == []


def test_a_store_fault_is_one_warning_and_anything_else_an_error() -> None:
    assert _logged(Failure(StoreError("disk full"))) == (None, [LogLevel.warn])
    assert _logged(Failure(KeyError("bug"))) == (None, [LogLevel.critical])
