"""File modes: what a kept output file gets. tempfile's mkstemp (used for atomic writes: write a temporary file,
then rename it) creates 0600 whatever the umask, so every writer sets the mode a plain open() would give."""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["umask_mode"]


def umask_mode(mode: int = 0o666) -> int:
    """`mode` less the process's umask: what open() would give a new file (0o666) or folder (0o777). tempfile's
    mkstemp/mkdtemp create 0600/0700 whatever the umask; files the user keeps get this mode instead."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return mode & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it (and put it straight back)
    os.umask(mask)
    return mode & ~mask
