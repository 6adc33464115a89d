"""Hand memory a finished piece of work freed back to the operating system.

Python, Arrow and delta-rs (Rust, the C allocator) all keep freed memory for reuse; a long-lived process
that peaks once per micro-batch then holds its high-water mark between batches. The stream's driver and
its executor workers take turns (the executors read and reduce, then the driver MERGEs), so whatever one
side keeps while the other works adds to the peak of the whole process tree.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache

import pyarrow as pa


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def release_free_memory() -> None:
    """Return freed memory to the OS: Arrow's pool releases its cached pages, glibc trims its heaps.

    Cheap (milliseconds); a no-op where the C library has no ``malloc_trim`` (musl, macOS). No garbage
    collection: what a batch held is freed by reference counting, and a full collection of the driver's
    heap costs tens of milliseconds per batch.
    """
    pa.default_memory_pool().release_unused()
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)
