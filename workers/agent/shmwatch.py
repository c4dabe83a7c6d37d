"""Shared memory a job's processes hold outside the agent pool, for the memory watch (Note [Shared memory of a job]).

Note [Shared memory of a job]
    ``RssAnon``/``Pss_Anon`` (workers.agent.launch) count private anonymous pages only. A job can also hold host
    memory as *shared* memory: ``mmap(-1, n)`` (``MAP_SHARED | MAP_ANONYMOUS``), ``memfd_create`` (mapped, or only
    written through its fd and never mapped), System V segments (``shmget``) and files in its ``/dev/shm``. Each
    held 1.5 GiB on a 323 MiB device before this watch, and the job succeeded.

    Every such object is a shmem inode, and the kernel keeps its allocated pages in ``st_blocks``. So the agent
    finds the objects a job holds — each process's open fds (``/proc/<pid>/fd``) and mappings
    (``/proc/<pid>/map_files``, readable by root) whose target is ``/memfd:…``, ``/dev/zero (deleted)`` (a shared
    anonymous mapping) or ``/SYSV…`` — and adds each inode's ``st_blocks`` once, however many processes map it.
    The chunks of the agent pool are memfds too (``zico-chunk``, allocator/src/chunk_os.cpp); they are the
    pool's, counted by the allocator against the budgets, and left out here by inode: the agent's own process
    holds an fd of each live chunk (``/proc/self/fd``), which a job cannot forge whatever it names its memfd. The
    job's ``/dev/shm`` is a size-limited tmpfs of its own (workers.agent.sandbox) whose used bytes
    (``statvfs``) count as well, mapped or not.

    The sum is added to the job's anonymous memory, under the same bound (Note [Memory outside the
    allocator] in workers.agent.agent). A System V segment the job created and detached is held but mapped by
    nobody and is not seen here; it lives in the job's own IPC namespace (``--unshare-ipc``), which ends, with
    the segment, when the job does.
"""
from __future__ import annotations

import os
from typing import Iterable

_SHARED_TARGETS = ("/memfd:", "/dev/zero", "/SYSV")
POOL_CHUNK = "/memfd:zico-chunk"  # the name allocator/src/chunk_os.cpp gives each chunk


def pool_inodes() -> set[tuple[int, int]]:
    """``(st_dev, st_ino)`` of every ``zico-chunk`` memfd this process holds open: the agent pool's live chunks
    (a job cannot add to them: they are this process's fds)."""
    out = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        path = f"/proc/self/fd/{name}"
        try:
            if os.readlink(path).startswith(POOL_CHUNK):
                st = os.stat(path)
                out.add((st.st_dev, st.st_ino))
        except OSError:
            continue
    return out


def _objects(pid: int) -> Iterable[str]:
    """Paths (under /proc/<pid>) of the fds and mappings of ``pid`` whose target is a shared-memory object."""
    for folder in ("fd", "map_files"):
        base = f"/proc/{pid}/{folder}"
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            path = f"{base}/{name}"
            try:
                if os.readlink(path).startswith(_SHARED_TARGETS):
                    yield path
            except OSError:
                continue


def tmpfs_used_bytes(path: str) -> int:
    """Bytes used on the file system holding ``path`` (``statvfs``), 0 when it is gone or unreadable."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return max(0, (st.f_blocks - st.f_bfree) * st.f_frsize)


def shared_bytes(pids: Iterable[int], exclude: set[tuple[int, int]]) -> int:
    """Bytes of shared memory the processes ``pids`` hold between them (Note [Shared memory of a job]): each
    shared-memory inode they open or map counted once by its allocated blocks, inodes in ``exclude`` (the
    pool's chunks, :func:`pool_inodes`) left out. Processes or objects that vanish meanwhile count 0."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for pid in pids:
        for path in _objects(pid):
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key in exclude or key in seen:
                continue
            seen.add(key)
            total += st.st_blocks * 512
    return total
