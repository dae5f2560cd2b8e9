"""Process-wide allocator settings for moving large frames.

Each frame in flight is a fresh bytes object of up to the maximum frame size. With glibc's
defaults, allocations above 128 KiB are mmapped and every release trims the heap, so each
megabyte moved costs fresh pages: hundreds of page faults and zeroing per frame, which
halves throughput. Raising the mmap and trim thresholds keeps such buffers in a heap that
is reused. Memory stays bounded: the heap keeps at most ``trim_threshold`` bytes free.
Entry points that run nodes or clients call ``tune_allocator()`` once at start.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
DEFAULT_MMAP_THRESHOLD = 8 * 1024 * 1024
DEFAULT_TRIM_THRESHOLD = 32 * 1024 * 1024


def tune_allocator(
    mmap_threshold: int = DEFAULT_MMAP_THRESHOLD, trim_threshold: int = DEFAULT_TRIM_THRESHOLD
) -> bool:
    """Apply the thresholds on glibc; return False (and change nothing) elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(M_TRIM_THRESHOLD, trim_threshold)
    )
