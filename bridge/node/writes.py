"""Store writes as one outcome, a send's duplicate id written with it, and the log lines
of the writes the node can do without."""

from __future__ import annotations

from twisted.internet.defer import Deferred, DeferredList, FirstError, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from bridge.node.address import Detection
from bridge.store.interfaces import IMessageStore
from bridge.store.records import TxId

log = Logger(namespace="bridge.node.broker")
"""The broker's log, whichever of its modules writes: one namespace, as before the broker
was split, so that filters on it still match."""


def join(writes: list[Deferred[None]]) -> Deferred[None]:
    """One Deferred for several store writes: fires when all are durable, fails on the
    first failure with that failure."""
    if not writes:
        return succeed(None)
    if len(writes) == 1:
        return writes[0]
    done: Deferred[None] = DeferredList(
        writes, fireOnOneErrback=True, consumeErrors=True
    ).addCallback(lambda _: None)
    return done.addErrback(_first_failure)


def _first_failure(failure: Failure) -> Failure:
    """A DeferredList's FirstError, unwrapped to the store's own error."""
    error = failure.value
    return error.subFailure if isinstance(error, FirstError) else failure


def log_failure(failure: Failure, what: str) -> None:
    log.failure("{what} failed", failure, what=what)


def warn_not_stored(failure: Failure, what: str) -> None:
    """A write the node can do without (it keeps the state in memory): one line, no
    traceback, for a failure as ordinary as a full disk."""
    log.warn("{what} were not stored: {why}", what=what, why=failure.getErrorMessage())


def store_detection(
    store: IMessageStore,
    detection: Detection | None,
    writes: list[Deferred[None]],
    store_tx: TxId | None,
) -> None:
    """Store a send's duplicate id with it, in the same group commit (or transaction),
    under its cache's key; a cache of size 0 keeps nothing, so nothing is stored."""
    if detection is not None and detection.cache.size:
        cache = detection.cache
        writes.append(
            store.store_duplicate_id(detection.key, detection.duplicate_id, cache.size, tx=store_tx)
        )
