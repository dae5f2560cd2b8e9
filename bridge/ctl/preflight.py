"""What a node checks before it creates anything: that its data directory (and the SQLite
store's, where ``[store] data-dir`` gives one) can be made or written, that an existing
store in it can be written, and that the files its security
settings name are there and good.

A node that cannot start says so in one line naming the key, the path and what is wrong,
and leaves the file system as it found it (no half-made data directory). The checks read
only: ``os.access`` and ``statvfs``, never a probe file.
"""

from __future__ import annotations

import os
from pathlib import Path

from bridge.config.node import NodeConfig, StoreType
from bridge.store.sqlite import FILENAME as STORE_FILENAME
from security import authenticator_for
from security.config import PREFIX as SECURITY
from security.errors import ConfigError
from security.validate import key_path

DATA_DIR_KEY = "node.data-dir"
STORE_DIR_KEY = "store.data-dir"


def check_startable(config: NodeConfig) -> None:
    """Raise ConfigError (file, key, path and problem) if the node cannot start here."""
    source = str(config.source)
    _check_dir(config.data_dir, source, DATA_DIR_KEY)
    if config.store.directory is not None:
        _check_dir(config.store.directory, source, STORE_DIR_KEY)
    if config.store.type is StoreType.SQLITE:
        key = DATA_DIR_KEY if config.store.directory is None else STORE_DIR_KEY
        _check_store(config.store_dir, source, key)
    settings = config.security
    if not settings.enabled:
        return
    for name, path in (
        ("users-file", settings.users_file),
        ("certificate-users-file", settings.certificate_users_file),
    ):
        if path is not None:
            _check_readable_file(path, source, key_path(SECURITY, name))
    authenticator_for(settings)  # reads and checks their contents too


def _check_dir(data_dir: Path, source: str, key: str) -> None:
    if data_dir.exists():
        if not data_dir.is_dir():
            raise ConfigError(source, key, f"{data_dir} is not a directory")
        if not _writable(data_dir):
            raise ConfigError(source, key, f"{data_dir} {_why_not_writable(data_dir)}")
        return
    existing = data_dir.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(source, key, f"cannot create {data_dir}: {existing} is not a directory")
    if not _writable(existing):
        raise ConfigError(
            source, key, f"cannot create {data_dir}: {existing} {_why_not_writable(existing)}"
        )


def _check_store(directory: Path, source: str, key: str) -> None:
    """An SQLite store already in ``directory`` must be readable and writable."""
    for name in (STORE_FILENAME, STORE_FILENAME + "-wal", STORE_FILENAME + "-shm"):
        store = directory / name
        if store.exists() and not os.access(store, os.R_OK | os.W_OK):
            raise ConfigError(source, key, f"the store {store} {_why_not_writable(store)}")


def _check_readable_file(path: Path, source: str, key: str) -> None:
    if not path.exists():
        raise ConfigError(source, key, f"{path} does not exist")
    if not path.is_file():
        raise ConfigError(source, key, f"{path} is not a file")
    if not os.access(path, os.R_OK):
        raise ConfigError(source, key, f"{path} cannot be read (permission denied)")


def _writable(directory: Path) -> bool:
    return os.access(directory, os.W_OK | os.X_OK)


def _why_not_writable(path: Path) -> str:
    """Why ``path`` cannot be written: its file system is read-only, or its permissions."""
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return "is on a read-only file system" if read_only else "is not writable (permission denied)"
