"""The sandbox a user-script job process runs in: its bubblewrap (``bwrap``) command line, uid and limits.

:meth:`Sandbox.for_job` checks a user-script spec (:mod:`zico_contracts.userjob`), prepares the job's writable
directories and writes the job's in-sandbox spec; :meth:`Sandbox.command` wraps ``python -m <module>`` in::

    bwrap <namespaces, mounts, environment> -- prlimit <limits> -- setpriv <uid, no privileges> -- python -m ...

What the job sees (every other path of the host does not exist for it):

============================  ==========  ==============================================================
path                          access      what
============================  ==========  ==============================================================
/usr, /bin, /lib*, /sbin      read-only   the system (libraries, ``python``'s base installation)
the Python environment        read-only   ``sys.prefix`` and ``sys.base_prefix`` of the agent, same paths
the repo's job-side code      read-only   ``zico_contracts``, ``workers/job``, ``zico_job``, ``allocator``,
                                          ``zico_workloads`` (the catalog's models and data, which the
                                          built-in catalog project trains; same paths; never
                                          ``platform/``: the web side and its settings)
/job/code                     read-only   the user's project (the current directory of the script)
/job/data                     read-only   the data directory, when the spec has one
/job/env                      read-only   the job's own packages, when its project asks for some
                                          (``workers.jobenv``; last on the import path)
/job/output                   writable    what the job keeps
/job/scratch, /tmp            writable    the job's private scratch directory (``/tmp`` is its ``.tmp``
                                          subdirectory)
/dev/shm                      writable    a tmpfs of the job's own, at most ``bypass_margin_bytes``; counted
                                          as the job's memory (Note [Shared memory of a job])
/proc, /dev                   minimal     a procfs of the job's own PID namespace; null, zero, random, tty
/dev/nvidia<minor>            device      a GPU job's one GPU and the driver's nodes (Note [A GPU in the sandbox])
/etc                          read-only   a few files (dynamic linker, time zone); passwd/group name the job
============================  ==========  ==============================================================

Namespaces: PID, IPC, UTS, cgroup and **network** (only a loopback with nothing listening: no Redis, no
PostgreSQL, no outside). The environment is cleared (``--clearenv``): the job gets only the variables below, so
the worker's ``DATABASE_URL``, ``REDIS_URL``, ``SECRET_KEY``... never reach it; bwrap itself is started with an
empty environment too. The inherited control and allocator sockets (``pass_fds``) survive: bwrap closes no fd.

Note [Dropping privileges]
    The worker runs as root. bwrap's own ``--uid`` only renames the job inside a user namespace: outside it the
    job is still root and reads a root-only 0600 file (checked here: it does). So bwrap runs privileged (no user
    namespace) and ``setpriv --reuid --regid --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all``
    makes the job a plain user with no capability it could regain: uid = gid = ``uid_base + job_id %
    uid_count`` (:class:`AgentSettings`), an id no account has, one per job. ``prlimit`` sets the limits first
    (as root, so any value can be set; ``RLIMIT_NPROC`` then counts this job's uid alone), instead of a
    ``preexec_fn``, which is unsafe in the agent's threaded process. A worker that is not root cannot change
    uid: bwrap then makes a user namespace and the job runs as the worker's own user.

Note [A GPU in the sandbox]
    A job on ``cuda:N`` gets that GPU's device node alone (``/dev/nvidia<minor>``, the minor from NVML), the
    driver's shared nodes (ctl, uvm, modeset) and ``/proc/driver/nvidia``, as a container runtime gives one
    GPU: the other GPUs have no node in the sandbox, whatever ``CUDA_VISIBLE_DEVICES`` the script sets. Its
    one GPU is then ``cuda:0`` inside, which is what its spec says there and what a script's
    ``torch.device("cuda")`` means. The driver's libraries come from ``/usr``. (Not yet run on a GPU host:
    the tests run the CPU path.)

Note [Signals through the sandbox]
    The agent's child is the outer bwrap; the job is two processes down (bwrap's PID-1 reaper, then python),
    and the outer bwrap kills the whole sandbox when it dies (``--die-with-parent``). A SIGTERM for the job
    (a cancel) must therefore go to the job's own process, found from its ``hello`` pid (its pid in the
    sandbox's namespace, matched against ``NSpid`` in ``/proc``): :meth:`workers.agent.launch.JobProcess.signal`.
    SIGKILL goes to the process group, as for any job. bwrap reports a job killed by signal N as exit
    status 128 + N, which :func:`workers.agent.launch.describe_exit` reads back.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zico_contracts import cpushare, userjob

from . import seccomp
from .settings import BYPASS_MARGIN_MAX_BYTES, AgentSettings

REPO = Path(__file__).resolve().parents[2]
CATALOG_PROJECT = REPO / "workers" / "job" / "catalog_project"  # Zico's own project: a catalog job's code
JOB_SIDE_DIRS = ("zico_contracts", "workers/job", "zico_job", "allocator", "zico_workloads")  # no platform/
IMPORT_PATH = (str(REPO), str(REPO / "zico_job" / "shim"), str(REPO / "allocator" / "python"))
SPEC_PATH = "/zico/spec.json"
TASKSET = "/usr/bin/taskset"  # util-linux: pins the sandbox to its slot's cores before it starts
SYSTEM_DIRS = ("/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin")
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "alternatives")
CUDA_SHARED_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


def cuda_device_nodes(index: int) -> list[str]:
    """The device nodes a job on GPU ``index`` gets: that GPU's ``/dev/nvidia<minor>`` (minor from NVML) and
    the driver's shared nodes present on this host. Raises SandboxUnavailable when the GPU has no node."""
    from ..nvml import DeviceInfoError, gpu_minor_number

    try:
        node = f"/dev/nvidia{gpu_minor_number(index)}"
    except DeviceInfoError as exc:
        raise SandboxUnavailable(f"GPU {index} cannot be given to a sandboxed job: {exc}") from None
    if not os.path.exists(node):
        raise SandboxUnavailable(f"GPU {index} cannot be given to a sandboxed job: {node} does not exist")
    return [node, *(n for n in CUDA_SHARED_NODES if os.path.exists(n))]


class SandboxUnavailable(RuntimeError):
    """User scripts cannot run on this host; the message says why and what to install or change."""


@functools.lru_cache(maxsize=8)
def refusal(bwrap: str) -> str | None:
    """Why user scripts cannot run here (None: they can): bwrap, prlimit or setpriv missing, or bwrap unable
    to create namespaces (a container without the privilege). Probes once per bwrap path (~10 ms)."""
    if not (os.path.isfile(bwrap) and os.access(bwrap, os.X_OK)):
        return (f"user scripts run only in a sandbox, and bubblewrap was not found at {bwrap} "
                f"(install the Debian package bubblewrap, or set ZICO_JOB_BWRAP)")
    for tool in ("prlimit", "setpriv"):
        if not shutil.which(tool, path="/usr/bin:/bin"):
            return f"user scripts need {tool} (Debian package util-linux) in /usr/bin"
    probe = [bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent",
             *(["--unshare-user"] if os.geteuid() != 0 else []), "--", "/bin/true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, env={})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap ({bwrap}) could not start a sandbox: {exc}"
    if done.returncode != 0:
        return (f"bubblewrap ({bwrap}) cannot create a sandbox on this host: {done.stderr.strip()[:300]} "
                f"(a container needs the privilege to create namespaces)")
    return None


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _private_dir(path: str, uid: int | None, field: str) -> None:
    """``path`` a real directory (created if missing, never a symlink), owned by the job's uid, mode 0700."""
    p = Path(path)
    if p.is_symlink():
        raise userjob.SpecError(field, f"{path} is a symbolic link; the job's directories must be real ones")
    p.mkdir(parents=True, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(p).st_mode):
        raise userjob.SpecError(field, f"{path} is not a directory")
    if uid is not None:
        os.chown(p, uid, uid, follow_symlinks=False)
    os.chmod(p, 0o700)  # not a symlink (checked above)


def _fresh_subdir(parent: str, name: str, uid: int | None) -> str:
    """``parent/name`` as a real directory of the job's: a symlink left there by an earlier run is removed
    first, so that bwrap (root) never follows it into a host path."""
    path = os.path.join(parent, name)
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    _private_dir(path, uid, "scratch_dir")
    return path


def _parent_dirs(dests: list[str], provided: list[str] | None = None, seen: set[str] | None = None) -> list[str]:
    """``--perms 0755 --dir P`` for every parent P of a mount point in ``dests`` that no mount (of ``provided``,
    default ``dests``) provides: bwrap would make them 0700 (root's), which the job's uid could not enter.
    ``seen``: parents already made (updated)."""
    out: list[str] = []
    seen = set() if seen is None else seen
    provided = dests if provided is None else provided
    for dest in dests:
        parent = os.path.dirname(dest)
        chain = []
        while parent not in ("/", ""):
            chain.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(chain):
            if d in seen or any(d == m or d.startswith(m + "/") for m in provided):
                continue
            seen.add(d)
            out += ["--perms", "0755", "--dir", d]
    return out


def _python_dirs() -> list[str]:
    dirs = []
    for d in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        d = os.path.realpath(d)
        if not any(d == m or d.startswith(m + os.sep) for m in ["/usr", *dirs]):
            dirs.append(d)
    return dirs


@dataclass
class Sandbox:
    """One job's sandbox. ``uid`` None: the worker is not root and the job keeps the worker's user."""

    job_id: int
    spec: dict[str, Any]  # the job's spec with in-sandbox paths (what the job process reads)
    host: dict[str, str]  # the host paths: code_dir, data_dir, output_dir, scratch_dir
    uid: int | None
    settings: AgentSettings
    host_device: str = "cpu"  # the spec's device on the host ("cuda:N"); inside, a GPU job's is "cuda:0"
    gpu_nodes: tuple[str, ...] = ()  # the device nodes of a GPU job (Note [A GPU in the sandbox])
    wrapped: bool = True  # False: Note [No sandbox for Zico's own code]

    @classmethod
    def for_job(cls, job_id: int, spec: dict[str, Any], settings: AgentSettings) -> "Sandbox":
        """Check ``spec`` (raises SpecError naming the field), refuse when no sandbox can run here (raises
        SandboxUnavailable) unless the code is Zico's own catalog project (Note [No sandbox for Zico's own
        code]), and prepare the writable directories: created, owned by the job's uid, 0700.

        Note [No sandbox for Zico's own code]
            On a host where bubblewrap cannot run, a user's script is refused, but a catalog job (its code
            :data:`CATALOG_PROJECT`, which only the worker names) still runs: the same job process with the
            same spec, environment and directories, its argv without the bwrap, prlimit and setpriv wrappers
            and its paths the host's. One job path either way; what changes is only the wall around it.
        """
        spec = userjob.validate_spec(dict(spec))
        why = refusal(settings.bwrap)
        if why and os.path.realpath(spec["code_dir"]) != str(CATALOG_PROJECT):
            raise SandboxUnavailable(why)
        if why:
            for field in ("output_dir", "scratch_dir"):
                _private_dir(spec[field], None, field)
            _fresh_subdir(spec["scratch_dir"], ".tmp", None)
            host = {f: spec[f] for f in userjob.SANDBOX_DIRS if spec.get(f) is not None}
            return cls(job_id, {**spec, "job": job_id}, host, None, settings, spec["device"], wrapped=False)
        for field in ("code_dir", "data_dir", "env_dir"):
            if spec.get(field) is not None and not os.path.isdir(spec[field]):
                raise userjob.SpecError(field, f"{spec[field]} is not a directory")
        nodes: tuple[str, ...] = ()
        if spec["device"].startswith("cuda"):
            nodes = tuple(cuda_device_nodes(int(spec["device"].partition(":")[2])))
        uid = settings.job_uid(job_id) if os.geteuid() == 0 else None
        for field in ("output_dir", "scratch_dir"):
            _private_dir(spec[field], uid, field)
        _fresh_subdir(spec["scratch_dir"], ".tmp", uid)
        _ensure_allocator_built()
        host = {f: spec[f] for f in userjob.SANDBOX_DIRS if spec.get(f) is not None}
        inner = {**spec, **{f: userjob.SANDBOX_DIRS[f] for f in host}, "job": job_id}
        if nodes:
            inner["device"] = "cuda:0"
        return cls(job_id, inner, host, uid, settings, spec["device"], nodes)

    def environment(self, job_env: dict[str, str]) -> dict[str, str]:
        """The job's whole environment: ``job_env`` (the control fds) and the sandbox's own variables."""
        env = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
               "HOME": userjob.SANDBOX_DIRS["scratch_dir"], "TMPDIR": "/tmp", "LANG": "C.UTF-8",
               "USER": f"job{self.job_id}", "LOGNAME": f"job{self.job_id}",
               "PYTHONPATH": os.pathsep.join(IMPORT_PATH + ((userjob.SANDBOX_DIRS["env_dir"],)
                                                            if "env_dir" in self.host else ())),
               "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONUNBUFFERED": "1", userjob.JOB_ID_ENV: str(self.job_id)}
        env.update({userjob.DIR_ENV[f]: self.spec[f] for f in self.host})  # the paths the job sees
        if not self.wrapped:  # Note [No sandbox for Zico's own code]: no mounts, so the host's paths
            env.update(HOME=self.host["scratch_dir"], TMPDIR=os.path.join(self.host["scratch_dir"], ".tmp"))
        if os.environ.get("ZICO_ALLOCATOR_BUILD_DIR"):
            env["ZICO_ALLOCATOR_BUILD_DIR"] = os.environ["ZICO_ALLOCATOR_BUILD_DIR"]
        return {**env, **job_env}

    def command(self, job_module: str, job_env: dict[str, str]) -> tuple[list[str], dict[str, str], list[int]]:
        """``(argv, env, fds)`` for ``subprocess.Popen``: the bwrap command running ``python -m job_module``,
        bwrap's own (empty) environment, and fds to pass and then close (the spec and /etc files). Not
        :attr:`wrapped`: ``python -m job_module`` itself, with the job's environment (Note [No sandbox for
        Zico's own code])."""
        s = self.settings
        spec_fd = _memfd("zico-spec", json.dumps(self.spec).encode())
        if not self.wrapped:
            argv = [sys.executable, "-m", job_module, "--spec-file", f"/proc/self/fd/{spec_fd}"]
            return argv, self.environment(job_env), [spec_fd]
        uid = self.uid if self.uid is not None else os.getuid()
        passwd_fd = _memfd("zico-passwd", f"root:x:0:0::/:/usr/sbin/nologin\njob{self.job_id}:x:{uid}:{uid}::"
                                          f"{userjob.SANDBOX_DIRS['scratch_dir']}:/usr/sbin/nologin\n".encode())
        group_fd = _memfd("zico-group", f"root:x:0:\njob{self.job_id}:x:{uid}:\n".encode())
        argv = [s.bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", "--hostname", "zico-job"]
        fds = [spec_fd, passwd_fd, group_fd]
        cpus = job_env.get(cpushare.CPUS_ENV)
        if cpus:  # Note [A job keeps its CPU slot] in workers.agent.seccomp: pinned from outside, locked inside
            argv[:0] = [TASKSET, "--cpu-list", cpus]
            program = seccomp.affinity_filter()
            if program is not None:
                fds.append(_memfd("zico-seccomp", program))
                argv += ["--seccomp", str(fds[-1])]
        if self.uid is None:
            argv += ["--unshare-user", "--disable-userns"]
        argv += ["--clearenv"]
        for key, value in self.environment(job_env).items():
            argv += ["--setenv", key, value]
        mounts: list[list[str]] = [["--ro-bind", "/usr", "/usr"]]
        for d in SYSTEM_DIRS:
            if os.path.islink(d):
                mounts.append(["--symlink", os.readlink(d), d])
            elif os.path.isdir(d):
                mounts.append(["--ro-bind", d, d])
        mounts += [["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"] for name in ETC_FILES]
        mounts += [["--perms", "0444", "--ro-bind-data", str(passwd_fd), "/etc/passwd"],
                   ["--perms", "0444", "--ro-bind-data", str(group_fd), "/etc/group"],
                   ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"],  # torch reads the CPUs
                   ["--proc", "/proc"], ["--dev", "/dev"]]
        scratch = self.host["scratch_dir"]
        # /tmp and /dev/shm before the Python environment and the repository: a checkout (or its venv) under
        # /tmp must stay visible, not be hidden by the job's own /tmp mounted over it
        # /dev/shm is a tmpfs of its own, at most the memory margin: what it holds is memory, counted with the
        # job's (Note [Shared memory of a job] in workers.agent.shmwatch)
        mounts += [["--bind", os.path.join(scratch, ".tmp"), "/tmp"],
                   ["--perms", "01777", "--size", str(s.bypass_margin_bytes or BYPASS_MARGIN_MAX_BYTES), "--tmpfs",
                    "/dev/shm"]]  # the agent passes its device's margin (DeviceAgent.bypass_margin)
        first = len(mounts)  # the mounts that others may lie under (/tmp); their parents are made first
        mounts += [["--ro-bind", d, d] for d in _python_dirs()]
        mounts += [["--ro-bind", str(REPO / d), str(REPO / d)] for d in JOB_SIDE_DIRS]
        build = os.environ.get("ZICO_ALLOCATOR_BUILD_DIR")
        if build and not os.path.realpath(build).startswith(str(REPO / "allocator") + os.sep):
            mounts.append(["--ro-bind", build, build])
        if self.host_device.startswith("cuda"):  # Note [A GPU in the sandbox]
            mounts += [["--dev-bind", dev, dev] for dev in self.gpu_nodes]
            mounts.append(["--ro-bind-try", "/proc/driver/nvidia", "/proc/driver/nvidia"])
        for field, mode in (("code_dir", "--ro-bind"), ("data_dir", "--ro-bind"), ("env_dir", "--ro-bind"),
                            ("output_dir", "--bind"),
                            ("scratch_dir", "--bind")):
            if field in self.host:
                mounts.append([mode, self.host[field], userjob.SANDBOX_DIRS[field]])
        mounts += [["--perms", "0444", "--ro-bind-data", str(spec_fd), SPEC_PATH]]
        dests, made = [m[-1] for m in mounts], set()
        argv += _parent_dirs(dests[:first], dests, made)
        for m in mounts[:first]:
            argv += m
        made.update(dests[:first])  # /tmp itself is mounted; its subdirectories are not
        later = _parent_dirs(dests[first:], dests[first:], made)  # after /tmp is mounted: a checkout under /tmp
        for d in later[3::4]:  # parents inside the job's /tmp live in its scratch: made here, entrable (0755)
            if d.startswith("/tmp/"):
                host = os.path.join(scratch, ".tmp", d[len("/tmp/"):])
                os.makedirs(host, exist_ok=True)
                os.chmod(host, 0o755)
        argv += later
        for m in mounts[first:]:
            argv += m
        argv += ["--chdir", userjob.SANDBOX_DIRS["code_dir"], "--"]
        argv += ["/usr/bin/prlimit", *(f"--{userjob.LIMITS[name].prlimit}={value}:{value + (name == 'cpu_s')}"
                                       for name, value in s.limits().items()), "--core=0:0", "--"]
        if self.uid is not None:
            argv += ["/usr/bin/setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                     "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
        argv += [sys.executable, "-m", job_module, "--spec-file", SPEC_PATH]
        return argv, {}, fds


def _ensure_allocator_built() -> None:
    """The job cannot build the allocator in its read-only tree: build (or check) it here, in the agent."""
    from zico_allocator import build

    build.ensure_core()
    build.ensure_shim()
