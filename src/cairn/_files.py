"""Reading a file cairn did not write itself (a run folder's, a compare folder's, a config):
regular files only, bounded in total, never through a symbolic link that leaves a given root.

    open_regular(path, root=...)    a binary file object; UnsafeFile when ``path`` is a FIFO,
                                    a device, a socket or a folder, or (with ``root``) when it
                                    resolves outside ``root`` (a symbolic link out of the run)
    read_bytes / read_text          the whole file, at most ``limit`` bytes (UnsafeFile past it)

A FIFO is opened non-blocking and refused before anything is read, so a ``mkfifo`` in a run
folder never hangs a reader. Light to import (the standard library only): the config loader
and the CLI use it too.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["UnsafeFile", "check_regular", "open_regular", "read_bytes", "read_text"]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


class UnsafeFile(ValueError):
    """A file that is not read: not a regular file, a link out of its folder, or too large.
    A ValueError, so the CLI reports it as one line like any bad input."""


def _kind(mode: int) -> str:
    return next((word for test, word in _KINDS if test(mode)), "not a regular file")


def _check_root(path: Path, root: Path | None) -> None:
    if root is None:
        return
    real, top = os.path.realpath(path), os.path.realpath(root)
    if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
        raise UnsafeFile(
            f"{str(path)!r} is a symbolic link leading out of {str(root)!r} (to {real!r}); "
            "cairn reads only the folder's own files: replace the link with the file"
        )


def open_regular(path: str | Path, *, root: str | Path | None = None) -> BinaryIO:
    """``path`` opened for binary reading when it is a regular file (inside ``root`` once
    links are resolved, when given); FileNotFoundError when missing, else UnsafeFile."""
    path = Path(path)
    _check_root(path, None if root is None else Path(root))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # a FIFO: no wait
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeFile(
                f"{str(path)!r} is {_kind(mode)}, not a regular file: it is not read "
                "(replace it with the file it should be, or remove it)"
            )
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str | Path, *, root: str | Path | None = None) -> None:
    """UnsafeFile unless ``path`` is missing or a regular file (inside ``root``)."""
    try:
        open_regular(path, root=root).close()
    except FileNotFoundError:
        return


def read_bytes(path: str | Path, limit: int, *, root: str | Path | None = None) -> bytes:
    """The bytes of regular file ``path``, at most ``limit`` (UnsafeFile naming the limit
    when it holds more; never more than ``limit + 1`` bytes are read)."""
    with open_regular(path, root=root) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(
            f"{str(path)!r} holds more than {limit} bytes, more than cairn reads of it "
            "(a file of that size is not one cairn wrote)"
        )
    return data


def read_text(
    path: str | Path, limit: int, *, root: str | Path | None = None, errors: str = "strict"
) -> str:
    """``read_bytes`` decoded as UTF-8."""
    return read_bytes(path, limit, root=root).decode("utf-8", errors)
