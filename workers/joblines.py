"""How a job's words leave the device worker: host paths made neutral in what its tenant sees (failure reasons,
profile errors, its log), and its lines made unmistakable in what the worker itself logs.

Note [Host paths in what a tenant sees]
    A job process runs with the worker's Python environment and Zico's job-side code bound read-only at their
    host paths (workers.agent.sandbox), so a crash inside torch names
    ``/srv/zico/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py``: where the worker is installed,
    which user runs it, which Python. None of that is the tenant's to know, and all of it would help an attack
    on the host. :func:`neutral_paths` rewrites every such prefix to a neutral name: a site-packages directory
    to ``<python>/site-packages``, the rest of the environment (``sys.prefix``, ``sys.base_prefix``) to
    ``<python>`` (an interpreter directory outside them to ``<python>/bin``), the repository the worker runs
    from to ``<zico>``. The longest prefix wins (a venv inside the repository is ``<python>``, not
    ``<zico>/.venv``), a prefix counts only as a whole path (``/usr`` is not rewritten inside ``/usr2`` or
    ``/job/code/usr``), and the job's own sandbox paths (``/job/code``, ...) stay as they are: they are the job's.
    Every reason and log line the worker sends for a tenant goes through it (workers.agent.agent.failure_reason,
    workers.runner, workers.profiling, workers.usercode.LogRelay).

Note [A job's lines in the worker's log]
    The worker's own log is read by operators, and a job can print anything: a line that looks like the
    worker's (``[zico] job stopped by the platform``), a newline that starts a forged log record, an ANSI
    escape that rewrites the operator's terminal. Every job line the worker's Python logging prints is
    :func:`for_log`: prefixed ``job <id> <stream>| `` and with its control characters escaped (``\\x1b``,
    ``\\n``, ...), so it is always one record and always marked as the job's.
"""
from __future__ import annotations

import functools
import os
import re
import site
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # the repository the worker runs from
PYTHON, SITE_PACKAGES, ZICO = "<python>", "<python>/site-packages", "<zico>"

# a path character before a prefix means the prefix is the middle of another path
_BEFORE = r"(?<![\w./~-])"
_AFTER = r"(?![\w.~-])"  # a prefix is a whole path component: /usr, not /usr2
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def host_prefixes() -> list[tuple[str, str]]:
    """``(host path, neutral name)`` of every prefix :func:`neutral_paths` rewrites (Note [Host paths in what a
    tenant sees]), longest path first; each path also as its resolved form where that differs. Never ``/``."""
    return list(_prefixes())


@functools.lru_cache(maxsize=1)
def _prefixes() -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}

    def add(path, name: str) -> None:
        if not path:
            return
        for p in {os.path.normpath(str(path)), os.path.realpath(str(path))}:
            if p not in ("/", ".") and p.startswith("/"):
                found.setdefault(p, name)

    sites = list(getattr(site, "getsitepackages", lambda: [])())
    sites += [site.getusersitepackages() if hasattr(site, "getusersitepackages") else ""]
    sites += [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
    sites += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    for p in sites:
        add(p, SITE_PACKAGES)
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        add(p, PYTHON)
    for p in (os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))):
        if not any(p.startswith(q + os.sep) for q, name in list(found.items()) if name == PYTHON):
            add(p, PYTHON + "/bin")  # an interpreter outside its prefixes (rare): its directory alone
    add(REPO, ZICO)
    return tuple(sorted(found.items(), key=lambda kv: (-len(kv[0]), kv[0])))


@functools.lru_cache(maxsize=1)
def _pattern() -> tuple[re.Pattern, dict[str, str]]:
    names = dict(_prefixes())
    alternation = "|".join(re.escape(p) for p, _ in _prefixes())
    return re.compile(f"{_BEFORE}({alternation}){_AFTER}"), names


def neutral_paths(text: str) -> str:
    """``text`` with every host path prefix of the worker's Python environment and repository replaced by its
    neutral name (Note [Host paths in what a tenant sees]); the job's sandbox paths are kept. Idempotent."""
    if not text:
        return text
    pattern, names = _pattern()
    return pattern.sub(lambda m: names[m.group(1)], text)


def escape_controls(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1, the Unicode line separators) written as its escape
    (``\\x1b``, ``\\n``, ``\\t``, ``\\u2028``), so it prints as one line and moves no terminal."""
    def esc(m: re.Match) -> str:
        c = m.group(0)
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100
                                                                     else f"\\u{ord(c):04x}")
    return _CONTROL.sub(esc, text)


def for_log(job_id, stream: str, line: str) -> str:
    """One job line as the worker's own log prints it (Note [A job's lines in the worker's log]):
    ``job <id> <stream>| <line>``, the line's control characters escaped."""
    return f"job {job_id} {stream}| {escape_controls(line)}"
