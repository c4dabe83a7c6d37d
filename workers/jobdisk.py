"""Each job's run directory on a file system of its own, as large as the job's disk limit: the kernel's bound
on what a job writes (Note [A job's disk] in workers.agent.diskwatch). Used by :mod:`workers.bootstrap` (the
policy, once at worker start), :mod:`workers.usercode`, :mod:`workers.runner` and :mod:`workers.profiling`
(each run directory made and removed).

:meth:`JobDisks.for_worker` decides the bound once: ``quota`` where this host can loop-mount a file system
(root, ``/dev/loop-control``, ``mkfs.ext4``, ``mount``, and a probe mount that works), else ``watch`` with the
reason; it also unmounts what a crashed worker of the same device left mounted. :meth:`JobDisks.make` makes a
run directory (``<var>/jobs/<id>``): with the quota, a sparse image file ``<var>/jobdisks/<device>/<name>.img``
formatted ext4 and mounted there (``nosuid,nodev``); :meth:`JobDisks.remove` unmounts it and removes both.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

from zico_contracts.jobdisk import QUOTA, WATCH
# no journal, no room kept for root or for growth, inode tables zeroed lazily: mkfs writes ~100 KiB whatever the size
MKFS = ("mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096", "-i", "16384", "-O", "^has_journal,^resize_inode",
        "-E", "lazy_itable_init=1,nodiscard")
MOUNT_OPTIONS = "loop,nosuid,nodev,noatime"
SLACK_BYTES = 2 << 20  # room past the limit on the job's file system, so that the watch sees the limit passed
TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
PROBE_BYTES = 8 << 20
TOOL_TIMEOUT_S = 60


class DiskError(OSError):
    """A run directory's file system could not be made or mounted; the message says which step and why."""


def _tool(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                              env={"PATH": TOOL_PATH, "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DiskError(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise DiskError(f"{' '.join(argv[:1] + argv[-2:])} exited with {done.returncode}: "
                        f"{(done.stderr or done.stdout).strip()[:300]}")


def _image_bytes(disk_bytes: int) -> int:
    """A first size for the image of a ``disk_bytes`` file system: ext4's own tables take ~1.6 % (an inode of
    256 bytes per 16 KiB), its bitmaps and a few MiB; :meth:`JobDisks._format` grows it where that was not enough."""
    size = disk_bytes + disk_bytes // 56 + 4 * (1 << 20)
    return -(-size // 4096) * 4096


def mounts_under(root: Path) -> list[tuple[str, str]]:
    """``(mount point, source)`` of every mount at or below ``root`` (``/proc/self/mountinfo``), deepest first."""
    root_s = os.path.realpath(root)
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or "-" not in fields:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        source = fields[fields.index("-") + 2]
        if point == root_s or point.startswith(root_s + "/"):
            found.append((point, source))
    return sorted(found, key=lambda f: -len(f[0]))


def loop_backing_file(source: str) -> str | None:
    """The file behind loop device ``source`` (``/dev/loop3``), or None for any other source."""
    name = os.path.basename(source)
    if not re.fullmatch(r"loop\d+", name):
        return None
    try:
        return Path(f"/sys/block/{name}/loop/backing_file").read_text().strip()
    except OSError:
        return None


def _unmount(point: str) -> None:
    """Unmount ``point``; a mount still busy (a process of the job that outlived it) is detached lazily and its
    loop device freed when the last user lets go."""
    try:
        _tool(["umount", point])
    except DiskError as exc:
        log.warning("unmounting %s: %s; detaching it lazily", point, exc)
        _tool(["umount", "-l", point])


@dataclass(frozen=True)
class JobDisks:
    """Where this worker's run directories live and what bounds them.

    Attributes:
        jobs_dir: the parent of every run directory (``<var>/jobs``).
        images_dir: this device's image files (``<var>/jobdisks/<device>``); only this worker uses it (the
            device lock, workers.agent.lock_device), so what is there at its start is a crashed run's.
        disk_bytes: a job's disk limit (``AgentSettings.disk_bytes``).
        bound: ``"quota"`` (each run directory a file system of ``disk_bytes`` and a little more) or ``"watch"``
            (plain directories; the agent's watch alone).
        why: why the bound is the watch ("" with the quota).
        start_ms: what a job's quota costs at its start and end (mkfs + mount + umount of the probe), ms.
    """

    jobs_dir: Path
    images_dir: Path
    disk_bytes: int
    bound: str = WATCH
    why: str = ""
    start_ms: float = 0.0

    @classmethod
    def for_worker(cls, var_dir: Path, device: str, disk_bytes: int) -> "JobDisks":
        """The bound of this worker's jobs, decided once (see the module docstring): a probe file system of
        ``PROBE_BYTES`` is made, mounted, written and removed. Mounts a crashed worker of ``device`` left under
        ``<var>/jobs`` are unmounted and its images removed first. Never raises for the host's lack of loop
        devices; the answer says why."""
        jobs_dir = Path(var_dir) / "jobs"
        images_dir = Path(var_dir) / "jobdisks" / re.sub(r"[^A-Za-z0-9._-]", "_", device)
        jobs_dir.mkdir(parents=True, exist_ok=True)
        why = cls._cannot()
        if why:
            return JobDisks(jobs_dir, images_dir, disk_bytes, WATCH, why)
        quota = JobDisks(jobs_dir, images_dir, disk_bytes, QUOTA)
        try:
            quota.clean_stale()
            probe = images_dir / "probe"
            t0 = time.perf_counter()
            quota._make_fs(probe, PROBE_BYTES)
            (probe / "written").write_bytes(b"\0" * 4096)
            quota.remove(probe)
            ms = (time.perf_counter() - t0) * 1000
        except OSError as exc:
            return JobDisks(jobs_dir, images_dir, disk_bytes, WATCH, f"a probe file system could not be made: {exc}")
        return JobDisks(jobs_dir, images_dir, disk_bytes, QUOTA, "", round(ms, 1))

    @staticmethod
    def _cannot() -> str:
        """Why this process cannot loop-mount (""): not root, no loop devices, tools missing."""
        if os.geteuid() != 0:
            return "the worker is not root, so it cannot mount a file system per job"
        if not os.path.exists("/dev/loop-control"):
            return "this host has no loop devices (/dev/loop-control is missing)"
        for tool in ("mkfs.ext4", "mount", "umount"):
            if not shutil.which(tool, path=TOOL_PATH):
                return f"{tool} is not installed (Debian packages e2fsprogs, mount)"
        return ""

    def describe(self) -> dict[str, Any]:
        """The heartbeat's ``job_disk`` (zico_contracts.jobdisk): ``{"bound": "quota"|"watch", "bytes": disk_bytes,
        "why": ...}`` (``why`` only with the watch)."""
        return {"bound": self.bound, "bytes": self.disk_bytes, **({"why": self.why} if self.why else {})}

    # -- one run directory ---------------------------------------------------------------------------
    def make(self, run_dir: Path) -> None:
        """A fresh, empty ``run_dir`` (what an earlier run left there is removed first), mode 0711, root's: with
        the quota the root of a file system of its own (no ``lost+found``). Raises DiskError (an OSError) when
        the file system could not be made or mounted."""
        run_dir = Path(run_dir)
        self.remove(run_dir)
        if self.bound == QUOTA:
            self._make_fs(run_dir, self.disk_bytes + SLACK_BYTES)
        else:
            run_dir.mkdir(parents=True)
        os.chmod(run_dir, 0o711)

    def remove(self, run_dir: Path) -> None:
        """Remove ``run_dir``: unmount every file system at or below it, then its files and its image. Never
        raises; what could not be removed is logged."""
        run_dir = Path(run_dir)
        for point, _source in mounts_under(run_dir):
            try:
                _unmount(point)
            except DiskError as exc:
                log.error("run directory %s stays mounted: %s", point, exc)
                return
        shutil.rmtree(run_dir, ignore_errors=True)
        self._image(run_dir).unlink(missing_ok=True)

    def clean_stale(self) -> None:
        """Unmount what a crashed worker of this device left under ``jobs_dir`` (mounts whose image lies in
        ``images_dir``; another device's worker sharing the directory keeps its own) and remove its images."""
        images = os.path.realpath(self.images_dir)
        for point, source in mounts_under(self.jobs_dir):
            backing = loop_backing_file(source)
            if backing and os.path.dirname(backing.removesuffix(" (deleted)")) == images:
                log.warning("unmounting %s, a crashed run's file system (%s)", point, backing)
                self.remove(Path(point))
        if self.images_dir.is_dir():
            for image in self.images_dir.glob("*.img"):
                image.unlink(missing_ok=True)

    def _image(self, run_dir: Path) -> Path:
        return self.images_dir / f"{Path(run_dir).name}.img"

    def _make_fs(self, run_dir: Path, usable_bytes: int) -> None:
        """Mount at ``run_dir`` (made) a new ext4 file system whose free space is at least ``usable_bytes``."""
        image = self._image(run_dir)
        self.images_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        run_dir.mkdir(parents=True, exist_ok=True)
        size = _image_bytes(usable_bytes)
        try:
            for _ in range(3):
                with open(image, "wb") as f:  # sparse: the host holds what the job writes, not its size
                    f.truncate(size)
                _tool([*MKFS, str(image)])
                _tool(["mount", "-o", MOUNT_OPTIONS, str(image), str(run_dir)])
                st = os.statvfs(run_dir)
                free = st.f_bavail * st.f_frsize
                if free >= usable_bytes:
                    break
                _unmount(str(run_dir))
                size += -(-(usable_bytes - free + (1 << 20)) // 4096) * 4096
            else:
                raise DiskError(f"an image of {size} bytes gave {free} bytes free, less than {usable_bytes}")
            lost = run_dir / "lost+found"  # nobody runs e2fsck here; the job never sees it anyway
            if lost.is_dir():
                lost.rmdir()
        except BaseException:
            self.remove(run_dir)
            raise


def make_run_dir(run_dir: Path, disks: JobDisks | None) -> None:
    """:meth:`JobDisks.make` of ``run_dir``, or without ``disks`` a plain fresh directory (0711)."""
    if disks is not None:
        disks.make(run_dir)
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    Path(run_dir).mkdir(parents=True)
    os.chmod(run_dir, 0o711)


def remove_run_dir(run_dir: Path, disks: JobDisks | None) -> None:
    """:meth:`JobDisks.remove` of ``run_dir``, or without ``disks`` its plain removal. Never raises."""
    if disks is not None:
        disks.remove(run_dir)
    else:
        shutil.rmtree(run_dir, ignore_errors=True)


def of_runtime(rt) -> JobDisks | None:
    """The worker's JobDisks (``workers.device.DeviceRuntime.job_disks``); None for a stand-in runtime."""
    get = getattr(rt, "job_disks", None)
    return get() if callable(get) else None
