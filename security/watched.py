"""A file loaded once and again whenever it changes on disk, keeping the last good load."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from security.errors import ConfigError

T = TypeVar("T")

log = logging.getLogger("txbridge.security")

_Signature = tuple[int, int, int, int] | None


def _signature(path: Path) -> _Signature:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size, status.st_ino, status.st_dev)


class WatchedFile(Generic[T]):
    """``value`` is ``load(path)``, re-run when the file's modification time, size or
    inode changed since the last load.

    A change that does not load (a half-written or wrong file) is logged once and the
    previous value stays; :meth:`reload` instead raises :class:`ConfigError`.

    Safe to use from several threads: a lock makes one thread load a changed file while
    the others wait for it (loading parses a file; it never hashes a password).
    """

    def __init__(self, path: Path, load: Callable[[Path], T], what: str) -> None:
        self.path = path
        self._load = load
        self._what = what
        self._lock = threading.Lock()
        self._signature = _signature(path)
        self._value = load(path)

    @property
    def value(self) -> T:
        """The loaded value, loaded again first if the file changed since."""
        signature = _signature(self.path)
        with self._lock:
            if signature != self._signature:
                self._signature = signature
                try:
                    self._value = self._load(self.path)
                except ConfigError as error:
                    log.error(
                        "%s changed but cannot be used, keeping the previous one: %s",
                        self._what,
                        error,
                    )
                else:
                    log.info("%s %s changed on disk and was reloaded", self._what, self.path)
            return self._value

    def reload(self) -> None:
        """Load the file now; on ConfigError the previous value stays."""
        with self._lock:
            signature = _signature(self.path)
            value = self._load(self.path)
            self._signature = signature
            self._value = value
