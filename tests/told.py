"""A ``then`` callable (the node's and the store's hot-path callbacks: None once done,
else the failure) and the Deferred it fires, for a test to wait on."""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure


def told() -> tuple[Callable[[Failure | None], None], Deferred[None]]:
    """``(then, done)``: ``then(None)`` fires ``done``, ``then(failure)`` fails it."""
    done: Deferred[None] = Deferred()

    def then(failure: Failure | None) -> None:
        if failure is None:
            done.callback(None)
        else:
            done.errback(failure)

    return then, done
