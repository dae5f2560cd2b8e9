"""The disk's ceiling for durable large messages: the same bytes written as files of the
message size, each made durable (file and folder synced) before the next is written.

A durable large message is confirmed only once its body file is on disk, so on a disk
slower than the network this, not the raw socket, bounds what the node can reach. The
benchmarks measure it in the same run, next to the raw socket ceiling.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

MB = 1_000_000
CHUNK = 256 * 1024


def synced_write_ceiling(count: int, size: int, parent: Path | None = None) -> dict[str, Any]:
    """Write ``count`` files of ``size`` bytes in 256 KiB writes, each synced with its
    folder before the next starts; the rate in MB/s. ``parent`` is where the node's
    data-dir would be (the temporary folder by default), so the same disk is measured."""
    chunk = os.urandom(min(CHUNK, size))
    with tempfile.TemporaryDirectory(prefix="txbridge-disk-", dir=parent) as folder:
        started = time.monotonic()
        for index in range(count):
            path = os.path.join(folder, f"{index}.msg")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                left = size
                while left:
                    left -= os.write(fd, chunk[:left])
                os.fsync(fd)
            finally:
                os.close(fd)
            _sync_folder(folder)
        elapsed = time.monotonic() - started
    rate = count * size / MB / elapsed if elapsed > 0 else 0.0
    return {"seconds": elapsed, "bytes": count * size, "mb_per_s": rate}


def _sync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
