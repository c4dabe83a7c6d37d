"""How much disk a job's writable directories hold, for the agent's disk limit (Note [A job's disk]).

Note [A job's disk]
    A sandboxed job writes to two host directories: its output and its scratch (``/tmp`` is a
    subdirectory of the scratch: workers.agent.sandbox; ``/dev/shm`` is a tmpfs counted as memory). ``RLIMIT_FSIZE`` caps one file, not their sum, so a
    job writing many files could fill the worker's disk and stop every other job and the worker itself. The
    agent therefore measures both directories while the job runs and stops it once they hold more than
    ``AgentSettings.disk_bytes`` (``ZICO_JOB_DISK_BYTES``). A file counts its allocated blocks
    (``st_blocks``: a sparse file counts what it holds), and every entry, file or directory, at least one
    4 KiB block, so a job cannot exhaust the file system's inodes with empty files either.

    This is a watch, not a quota: between two measurements a job can write what the disk takes in
    ``disk_interval_s`` (and a walk of many files takes longer, so the next one waits ten times as long as
    the last took). A hard bound needs the file system's help (an XFS or ext4 project quota per job
    directory, or a size-capped file system per job), which a worker's disk does not always offer.
    A walk stops as soon as the limit is passed, so a job that makes millions of entries costs one walk to
    that point, not a walk of all of them.
"""
from __future__ import annotations

import os
import stat

MIN_ENTRY_BYTES = 4096  # what an entry counts at least: one block of the common file systems


def used_bytes(roots: list[str], stop_above: int | None = None) -> int:
    """Bytes the files and directories under ``roots`` hold (see the Note), not following symbolic links;
    the roots themselves are not counted and a root that does not exist counts 0. With ``stop_above``, the
    walk ends once the count passes it and returns the count so far (more than ``stop_above``). Entries that
    vanish during the walk are skipped; never raises for the job's files."""
    total = 0
    stack = [r for r in roots if r]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += max(st.st_blocks * 512, MIN_ENTRY_BYTES)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                if stop_above is not None and total > stop_above:
                    return total
    return total
