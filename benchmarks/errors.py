"""Bad input said in one line: the error every dlrmbench check raises, the argument parser every subcommand uses
and the one-line form of any error message (Hydra's and OmegaConf's span several lines).

The rule (README, "Bad input"): one line on stderr naming the bad value and what is allowed, exit code 2, nothing
written, before anything is measured.
"""
from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

__all__ = ["InputError", "OneLineParser", "one_line", "check_output_file", "check_output_dir", "MIN_FREE_BYTES"]

MIN_FREE_BYTES = 1 << 20
"""an output path on a device with less free space than this is refused before measuring (records are KBs)"""

_NOISE = ("full_key:", "object_type=", "reference_type=", "Set the environment variable HYDRA_FULL_ERROR",
          "msg=", "provider=")

class InputError(ValueError):
    """Bad input found by dlrmbench's own checks; the message names the value and what is allowed."""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (`prog: error: message (see prog --help)`), exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def one_line(e: BaseException, limit: int = 400) -> str:
    """The message of `e` and of its causes, collapsed into one line without Hydra's and OmegaConf's boilerplate
    (search paths, object types); a list of available options becomes `options: a, b, c`."""
    parts: list[str] = []
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e).split("Config search path:")[0]
        head, _, options = text.partition("Available options in ")
        for line in head.splitlines():
            line = line.strip().removeprefix("In 'config': ")
            if line and not line.startswith(_NOISE) and line not in parts:
                parts.append(line)
        if options:
            group, _, names = options.partition(":")
            parts.append(f"options for {group.strip()}: {', '.join(n.strip() for n in names.split() if n.strip())}")
        e = e.__cause__  # type: ignore[assignment]
    text = " ".join(p if p[-1] in ".:;" else p + ";" for p in parts).rstrip(";") if parts else "invalid input"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _existing_ancestor(path: Path) -> Path:
    p = path.absolute()
    while not p.exists():
        p = p.parent
    return p


def check_output_file(path: str | os.PathLike, what: str, create_folders: bool = True) -> None:
    """Refuse, before anything is measured, an output file that cannot be written: a directory, a path through a
    file, an unwritable file or folder, a missing folder (unless the writer creates folders), a device with less
    than MIN_FREE_BYTES free. Creates nothing."""
    p = Path(path)
    if not create_folders and not p.absolute().parent.is_dir():
        raise InputError(f"{what}={path}: folder {p.absolute().parent} does not exist")
    if not str(path):
        raise InputError(f"{what} is empty: name a file")
    if p.is_dir():
        raise InputError(f"{what}={path} is a directory: name a file inside it")
    base = _existing_ancestor(p)
    if base == p.absolute():
        if not p.is_file():
            raise InputError(f"{what}={path} exists and is not a regular file")
        if not os.access(p, os.W_OK):
            raise InputError(f"{what}={path} is not writable")
    elif not base.is_dir():
        raise InputError(f"{what}={path}: {base} is a file, not a folder")
    elif not os.access(base, os.W_OK | os.X_OK):
        raise InputError(f"{what}={path}: folder {base} is not writable")
    _check_free(base if base.is_dir() else base.parent, what, path)


def check_output_dir(path: str | os.PathLike, what: str) -> None:
    """Refuse an output folder that cannot be created or written (a file in the way, no permission, full)."""
    p = Path(path)
    if not str(path):
        raise InputError(f"{what} is empty: name a folder")
    base = _existing_ancestor(p)
    if not base.is_dir():
        raise InputError(f"{what}={path}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise InputError(f"{what}={path}: folder {base} is not writable")
    _check_free(base, what, path)


def _check_free(folder: Path, what: str, path: str | os.PathLike) -> None:
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free < MIN_FREE_BYTES:
        raise InputError(f"{what}={path}: the device holding {folder} has {free} bytes free (need ≥ "
                         f"{MIN_FREE_BYTES >> 20} MiB)")
