"""The message store on a PostgreSQL server, for nodes whose data must outlive their machine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from twisted.internet.interfaces import IReactorTime

from bridge.ha.lock import LeaseToken
from bridge.store.front import MessageStore
from bridge.store.pg_writer import PostgreSQLWriter


class PostgreSQLMessageStore(MessageStore):
    """``MessageStore`` on the database at ``url`` (``postgresql://USER@HOST:PORT/DB``; a
    store of its own in a schema with ``?options=-csearch_path%3DNAME``). Large message
    bodies are files in ``data_dir``. A malformed ``url``, an unreachable server or
    missing privileges fail ``open()`` with a ``StoreError`` saying which.

    With HA, ``token`` is the fencing token each transaction checks; a refused batch fails
    with ``Fenced`` and calls ``fenced`` (docs/ha.md)."""

    def __init__(
        self,
        url: str,
        data_dir: Path | str,
        reactor: IReactorTime,
        *,
        token: LeaseToken | None = None,
        fenced: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(PostgreSQLWriter(url, Path(data_dir), token), reactor, fenced)
