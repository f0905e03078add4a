"""Keep large request buffers in the C heap instead of mapping and unmapping them per request.

A Produce request of a megabyte passes through a few short-lived buffers of its size (the
socket read, the frame, the batch). glibc's malloc serves such sizes with ``mmap`` and returns
them with ``munmap`` on free (or trims the heap top back to the kernel), so every request
page-faults its buffers in again: measured on a 1 MiB frame, 0.9 ms of page faults against
0.04 ms for the copies themselves, and the broker's CPU per produced megabyte halved once the
buffers stayed in the heap (docs/performance.md). Kafka's JVM keeps a heap for the same reason.

Only the ``trio_broker run`` process calls this; it changes process-wide malloc settings, so a
library user's process (the pytest plugin's in-process broker) is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Allocations below this come from the heap (glibc's largest dynamic threshold on 64-bit).
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
#: Free memory at the heap's top kept for the next requests before it is returned to the kernel.
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024


def keep_large_buffers_in_heap() -> bool:
    """Set glibc's mmap and trim thresholds; False (nothing changed) on another C library."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
