"""The embedded default message store: one SQLite file in the node's data directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from bridge.ha.lock import LeaseToken
from bridge.store.front import MessageStore
from bridge.store.writer import Writer

FILENAME = "messages.sqlite"
DEFAULT_BUSY_TIMEOUT = 5.0


class SQLiteMessageStore(MessageStore):
    """``MessageStore`` on ``data_dir/messages.sqlite``, large bodies in files beside it.

    ``busy_timeout`` (seconds) is how long a commit waits for another process holding the
    file's write lock before its batch fails. With HA on a shared store directory,
    ``token`` is the fencing token each write transaction checks; a refused batch fails
    with ``Fenced`` and calls ``fenced`` (docs/ha.md).
    """

    def __init__(
        self,
        data_dir: Path | str,
        reactor: IReactorTime,
        *,
        filename: str = FILENAME,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        token: LeaseToken | None = None,
        fenced: Callable[[], None] | None = None,
    ) -> None:
        self.path = Path(data_dir) / filename
        self._sqlite = Writer(self.path, busy_timeout, token)
        super().__init__(self._sqlite, reactor, fenced)

    def write_under(self, token: LeaseToken) -> Deferred[None]:
        """Between two batches, move the store's live lock to ``token`` (the same holder at
        a newer activation sequence) and write under it from then on (``Fenced`` if the
        store no longer carries the old one)."""
        return self.between_batches(lambda: self._sqlite.move_token(token))
