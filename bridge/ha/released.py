"""The reactor's watch over a live lock's release notices (:class:`IReleaseNotices`): a
backup tries the lease the moment the live node releases it, not at its next
``lease-ping-time``. No thread and no poll: the reactor wakes when the notices'
connection is readable."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from twisted.internet.error import ConnectionLost
from twisted.internet.interfaces import IReactorFDSet, IReadDescriptor
from twisted.python.failure import Failure
from zope.interface import implementer

from bridge.ha.lock import IReleaseNotices


@implementer(IReadDescriptor)
class ReleaseWatch:
    """Calls ``released`` for each notice; ``lost`` once, with why, if the connection goes
    (the watch is then over: the lock's next ``listen`` opens another)."""

    def __init__(
        self,
        reactor: Any,
        notices: IReleaseNotices,
        released: Callable[[], None],
        lost: Callable[[str], None],
    ) -> None:
        self._reactor = IReactorFDSet(reactor)
        self._notices = notices
        self._released = released
        self._lost = lost
        self._fd = os.dup(notices.fileno())
        """A descriptor of our own for the connection's socket: libpq closes its own when
        it finds the connection lost, and the reactor must stop watching a descriptor
        that is still open (one closed under it could be reused and never watched)."""
        self._why = ""
        self._reactor.addReader(self)

    def fileno(self) -> int:
        return self._fd

    def doRead(self) -> Failure | None:
        try:
            count = self._notices.received()
        except ConnectionError as error:
            self._why = str(error)  # the reactor stops watching, then tells us (not why)
            return Failure(ConnectionLost())
        if count:
            self._released()
        return None

    def connectionLost(self, reason: Failure) -> None:
        self._close()
        self._lost(self._why or reason.getErrorMessage())

    def stop(self) -> None:
        """Stop watching (before the lock closes the connection)."""
        if self._fd != -1:
            self._reactor.removeReader(self)
            self._close()

    def _close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd != -1:
            os.close(fd)

    def logPrefix(self) -> str:
        return "lease-release"
