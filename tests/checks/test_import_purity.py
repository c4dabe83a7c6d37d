"""Each room imports only what docs/architecture.md ("Rooms") allows it.

Two checks per room: a subprocess imports every module of the room, with everything forbidden importable
(the repository's whole path and DJANGO_SETTINGS_MODULE set), and asserts no forbidden top-level package landed
in ``sys.modules``; and a static scan of every ``import`` statement in the room's files, function-local
ones included (a lazy import runs only on some paths, which the subprocess may not take).

    zico_contracts   the standard library only
    zico_workloads   never Django, Celery, ``workers`` or the Django project ``zico``
    workers          never Django or ``zico`` (the Django project, under platform/)
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


def forbidden(room: str, names: set[str]) -> set[str]:
    """The top-level packages of the module names ``names`` that ``room`` may not import."""
    package, _, banned = ROOMS[room]
    top = {n.split(".")[0] for n in names}
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


def test_the_scan_sees_a_function_local_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from django.conf import settings\n    import workers.tasks\n    from . import x\n")
    assert static_imports(f) == [(2, "django"), (3, "workers")]
