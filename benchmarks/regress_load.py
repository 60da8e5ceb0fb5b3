"""A background load for timing under stress: two busy processes and one that streams memory.

`with background_load(): ...` starts them and always stops them (also on an exception or Ctrl-C); each child also
exits by itself within half a second once its parent is gone, so a killed benchmark leaves nothing behind.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["LOAD_WHAT", "background_load"]

LOAD_WHAT = "2 busy-loop processes + 1 process copying 2 × 128 MiB arrays (streaming memory)"

# Each child polls its parent; when the parent is gone (getppid changes), it exits.
_WATCH = "import os, time\nparent = int(os.environ['DLRMBENCH_LOAD_PARENT'])\n"
_BUSY = _WATCH + """
while os.getppid() == parent:
    end = time.monotonic() + 0.2
    x = 0
    while time.monotonic() < end:
        x += 1
"""
_STREAM = _WATCH + """
import numpy as np
a = np.ones(16 << 20)  # 128 MiB of float64
b = np.empty_like(a)
while os.getppid() == parent:
    np.copyto(b, a)
    np.copyto(a, b)
"""


@contextmanager
def background_load(busy: int = 2, streams: int = 1) -> Iterator[list[int]]:
    """Run `busy` CPU-bound and `streams` memory-streaming processes for the duration of the block; yields their
    pids. They are terminated (then killed) on the way out, whatever ends the block."""
    env = {**os.environ, "DLRMBENCH_LOAD_PARENT": str(os.getpid())}
    procs: list[subprocess.Popen] = []
    try:
        for code in [_BUSY] * busy + [_STREAM] * streams:
            procs.append(subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        time.sleep(0.5)  # let the streaming process allocate and the scheduler see the load
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
