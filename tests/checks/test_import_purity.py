"""Each room imports only what docs/architecture.md ("Rooms") allows it.

Two checks per room: a subprocess imports every module of the room, with everything forbidden importable
(the repository's whole path and DJANGO_SETTINGS_MODULE set), and asserts no forbidden top-level package landed
in ``sys.modules``; and a static scan of every ``import`` statement in the room's files, function-local
ones included (a lazy import runs only on some paths, which the subprocess may not take).

    zico_contracts   the standard library only
    zico_workloads   never Django, Celery, ``workers`` or the Django project ``zico``
    workers          never Django or ``zico`` (the Django project, under platform/)
    workers/job      the job process: ``zico_contracts``, ``zico_job``, ``zico_workloads``, the allocator binding
                     ``zico_allocator``, torch, numpy and the standard library (what those load in turn too);
                     never ``workers`` outside ``workers.job``, never Django, Celery, Redis or ``placement``
    platform/zico    never ``workers``
"""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATH = os.pathsep.join(str(p) for p in (ROOT / "platform", ROOT / "allocator" / "python", ROOT))

# room: (package, its folder, forbidden top-level packages; None: all but the standard library)
ROOMS = {
    "zico_contracts": ("zico_contracts", ROOT / "zico_contracts", None),
    "zico_workloads": ("zico_workloads", ROOT / "zico_workloads", {"django", "celery", "kombu", "workers", "zico"}),
    "workers": ("workers", ROOT / "workers", {"django", "zico"}),
    "workers/job": ("workers.job", ROOT / "workers" / "job",
                    {"django", "zico", "celery", "kombu", "billiard", "redis", "placement", "platform"}),
    "platform/zico": ("zico", ROOT / "platform" / "zico", {"workers"}),
}
# Imported by others, not by the room: kombu.utils.json imports django.utils.functional (its JSON encoder knows
# Django's lazy strings) whenever Django is installed; it loads no settings, no app, no ORM.
TOLERATED = {"workers": ("django", "django.utils")}  # these modules and, for the second, its submodules


def tolerated(room: str, name: str) -> bool:
    return any(name == t or (t.count(".") and name.startswith(t + ".")) for t in TOLERATED.get(room, ()))


def modules(package: str, folder: Path) -> list[str]:
    """Every module of ``package`` (dotted names), ``__main__`` modules left out (importing one runs it)."""
    names = []
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).with_suffix("")
        if rel.name == "__main__" or "__pycache__" in rel.parts:
            continue
        parts = [package, *rel.parts]
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


IMPORT_ALL = """
import importlib, json, sys
names = json.loads(sys.argv[1])
before = set(sys.modules)
if sys.argv[2] == "zico":
    import django
    django.setup()  # the Django project's modules need their settings; django itself is allowed there
    before = set(sys.modules)
for name in names:
    importlib.import_module(name)
if sys.argv[2] == "workers":
    from workers.celery_app import make_app
    make_app().loader.import_default_modules()  # where Celery's Django fixup would call django.setup()
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def imported_in_a_fresh_process(package: str, names: list[str]) -> set[str]:
    env = {**os.environ, "PYTHONPATH": PATH, "DJANGO_SETTINGS_MODULE": "zico.test_settings", "DEBUG": "1"}
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL, json.dumps(names), package], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


# what a file of the job room may name in an import (besides the standard library and workers.job itself)
JOB_ROOM_IMPORTS = {"zico_contracts", "zico_job", "zico_workloads", "zico_allocator", "torch", "numpy"}


def forbidden(room: str, names: set[str]) -> set[str]:
    """The top-level packages of the module names ``names`` that ``room`` may not import (for the job room,
    ``workers``' modules outside ``workers.job`` by their own names)."""
    package, _, banned = ROOMS[room]
    top = {n.split(".")[0] for n in names}
    if room == "workers/job":
        host = {n for n in names if n.split(".")[0] == "workers" and n not in ("workers", "workers.job")
                and not n.startswith("workers.job.")}
        return (top & banned) | host
    if banned is None:
        return {m for m in top if m not in sys.stdlib_module_names and m != package}
    return top & banned


@pytest.mark.parametrize("room", list(ROOMS))
def test_importing_every_module_of_a_room_loads_nothing_it_may_not_import(room):
    package, folder, _ = ROOMS[room]
    names = modules(package, folder)
    assert len(names) > 3, names  # the walk found the room
    loaded = {n for n in imported_in_a_fresh_process(package, names) if not tolerated(room, n)}
    assert forbidden(room, loaded) == set()


def static_imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in ``path``, wherever it stands in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


@pytest.mark.parametrize("room", list(ROOMS))
def test_no_file_of_a_room_imports_what_it_may_not(room):
    _, folder, _ = ROOMS[room]
    bad = [f"{path.relative_to(ROOT)}:{line}: {top}"
           for path in sorted(folder.rglob("*.py")) if "__pycache__" not in path.parts
           for line, top in static_imports(path) if forbidden(room, {top})]
    assert bad == []


def job_room_imports(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path`` (a file of workers/job) that the job room may not name:
    anything but the standard library, :data:`JOB_ROOM_IMPORTS` and ``workers.job``; relative imports
    resolved against the file's package, so ``from .. import gate`` is caught too."""
    package = package or ".".join(path.parent.relative_to(ROOT).parts)  # the file's own package
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            names = [module] if node.module or not node.level else [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            ok = (top in sys.stdlib_module_names or top in JOB_ROOM_IMPORTS
                  or name == "workers.job" or name.startswith("workers.job."))
            if not ok:
                bad.append((node.lineno, name))
    return bad


def test_no_file_of_the_job_room_imports_beyond_its_list():
    folder = ROOMS["workers/job"][1]
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}"
           for path in sorted(folder.rglob("*.py")) if "__pycache__" not in path.parts
           for line, name in job_room_imports(path)]
    assert bad == []


def test_the_job_room_scan_sees_a_host_side_import(tmp_path):
    f = tmp_path / "probe.py"  # read as a module of workers.job
    f.write_text("import os, torch\nfrom . import control\nfrom .. import gate\nfrom workers.job import x\n"
                 "def g():\n    from workers.agent import sandbox\n    import redis\n")
    assert job_room_imports(f, "workers.job") == [(3, "workers.gate"), (6, "workers.agent"), (7, "redis")]


def test_the_scan_sees_a_function_local_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from django.conf import settings\n    import workers.tasks\n    from . import x\n")
    assert static_imports(f) == [(2, "django"), (3, "workers")]
