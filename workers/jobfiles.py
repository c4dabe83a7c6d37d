"""Reading files a job wrote (its scratch and output dirs) without trusting them: the worker opens the name
relative to the directory with O_NOFOLLOW | O_NONBLOCK (a symlink is refused, a FIFO never blocks), refuses
anything but a regular file or a file over a stated bound, and reads at most that bound."""
from __future__ import annotations

import os
import stat
from pathlib import Path

# The most bytes the worker reads from one job-written file (the profile trace of a few iterations is far less).
MAX_JOB_FILE_BYTES = 16 * 1024 * 1024


class JobFileError(ValueError):
    """A job-written file the worker refuses; the message names the file and what was wrong."""


def read_job_file(directory: Path, name: str, max_bytes: int = MAX_JOB_FILE_BYTES) -> bytes:
    """The bytes of ``directory/name`` (``name`` one path component), at most ``max_bytes``. Raises
    JobFileError when the name is not one component, is a symlink, is not a regular file (FIFO, device,
    directory) or is larger than ``max_bytes``; OSError when it is missing or unreadable."""
    if not name or "/" in name or name in (".", ".."):
        raise JobFileError(f"{name!r} is not a single file name")
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == 40:  # ELOOP: the name is a symlink
                raise JobFileError(f"{name} is a symlink; the worker reads only regular files") from None
            raise
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JobFileError(f"{name} is not a regular file (mode {stat.filemode(st.st_mode)})")
        if st.st_size > max_bytes:
            raise JobFileError(f"{name} holds {st.st_size} bytes, over the bound of {max_bytes}")
        data = os.read(fd, max_bytes + 1)
        if len(data) > max_bytes:
            raise JobFileError(f"{name} grew past the bound of {max_bytes} bytes while read")
        return data
    finally:
        os.close(fd)
