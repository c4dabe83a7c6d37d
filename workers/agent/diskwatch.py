"""How much disk a job's writable directories hold, for the agent's disk watch (Note [A job's disk]).

Note [A job's disk]
    A sandboxed job writes to two host directories: its output and its scratch (``/tmp`` is a
    subdirectory of the scratch: workers.agent.sandbox; ``/dev/shm`` is a tmpfs counted as memory).
    ``RLIMIT_FSIZE`` caps one file, not their sum, so a job writing many files could fill the worker's disk
    and stop every other job and the worker itself. Two bounds hold a job to ``AgentSettings.disk_bytes``
    (``ZICO_JOB_DISK_BYTES``; unset, the smaller of 64 GiB and half the free space under the worker's jobs
    directory at its start divided among its slots: ``AgentSettings.fit_disk``):

    * **The quota, the kernel's** (workers.jobdisk), where the host allows: the run directory that holds
      both (``<var>/jobs/<id>``) is a file system of its own, a sparse image file
      (``<var>/jobdisks/<device>/<id>.img``) formatted ext4 without a journal and loop-mounted ``nosuid,nodev``
      there before the sandbox starts, with ``disk_bytes`` and ``jobdisk.SLACK_BYTES`` (2 MiB) or a little more
      free. A write past that fails with ENOSPC (a ``fallocate`` of 8 GiB fails at once), and the host's disk
      holds what the job wrote plus ext4's few hundred KiB, never more than the image. The worker unmounts it
      and removes the image after the output upload, whatever the outcome; a worker restarted after a crash
      unmounts what its device's runs left (``JobDisks.clean_stale``). The job sees only its two
      directories (``lost+found`` is removed), owned by its uid as before. Cost per job, measured on the
      test machine: mkfs + mount + umount took 12 ms at the median for 64 MiB and 26 ms for 64 GiB (80 ms at
      worst; a second mkfs, ~15 ms, where ext4's tables took more than the first guess of the image's size),
      against a job start of seconds. Whether the host allows is decided once at worker start, by a probe
      mount (``JobDisks.for_worker``): a worker that is not root, a host without ``/dev/loop-control``
      (a container without the loop devices) or a mount refused leaves the watch alone, and the worker says
      so in its log and in its heartbeat (``job_disk``: ``{"bound": "watch", "bytes", "why"}``).
    * **The watch, the agent's**, always, and the only bound where there is no quota: the agent measures both
      directories while the job runs and stops it once they hold more than ``disk_bytes`` ("wrote more than
      ... over the disk limit of a job (ZICO_JOB_DISK_BYTES): stopped"); with the quota this is how a job that
      filled its file system (and, refused, waits or retries) ends with a reason that names the limit. A file
      counts its allocated blocks (``st_blocks``: a sparse file counts what it holds), and every entry, file
      or directory, at least one 4 KiB block, so a job cannot exhaust the file system's inodes with empty
      files either. Alone it is only a watch: between two measurements a job can write what the disk takes
      in ``disk_interval_s`` (and a walk of many files takes longer, so the next one waits ten times as long
      as the last took). A walk stops as soon as the limit is passed, so a job that makes millions of entries
      costs one walk to that point, not a walk of all of them.

    A catalog job's output directory is its checkpoint directory, kept for a resume outside its run
    directory: the quota holds its scratch, the watch both (its code is Zico's own project).
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
