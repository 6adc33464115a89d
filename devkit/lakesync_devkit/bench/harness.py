"""What every benchmark runs on: an embedded stack, either the user's or a temporary one."""

from __future__ import annotations

import resource
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from lakesync_devkit.dev.stack import DevStack


@contextmanager
def bench_stack(state_dir: str | None, *, prefix: str) -> Iterator[DevStack]:
    """The stack at ``state_dir`` (started if needed and left running), else a temporary one that is
    stopped and removed afterwards, so a benchmark never leaves servers or data behind by surprise."""
    if state_dir:
        stack = DevStack(state_dir)
        stack.up()
        yield stack
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as temp:
        stack = DevStack(temp)
        stack.up()
        try:
            yield stack
        finally:
            stack.down()


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux reports ru_maxrss in KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
