"""Two rules of the web side's job lifecycle, checked by a static scan of platform/zico:

* one owner: only zico.jobs.lifecycle calls the status write (``transition``, ``try_transition``,
  ``transition_many``);
* no import circle between the model modules: cluster.models, jobs.models, jobs.events, jobs.transitions
  and tenants.models import each other only at the top (no function-level import put there to break a
  circle), and those top-level imports form no cycle.
"""
import ast
from pathlib import Path

ZICO = Path(__file__).resolve().parents[2] / "platform" / "zico"
WRITES = {"transition", "try_transition", "transition_many"}
MODELS = {"zico.cluster.models": "cluster/models.py", "zico.jobs.models": "jobs/models.py",
          "zico.jobs.events": "jobs/events.py", "zico.jobs.transitions": "jobs/transitions.py",
          "zico.tenants.models": "tenants/models.py"}


def _called_names(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return out


def test_only_the_lifecycle_module_calls_the_status_write():
    callers = sorted(str(p.relative_to(ZICO)) for p in ZICO.rglob("*.py")
                     if "migrations" not in p.parts and _called_names(ast.parse(p.read_text())) & WRITES)
    assert callers == ["jobs/lifecycle.py"]


def _imports(path: Path, package: str) -> tuple[set[str], list[str]]:
    """(modules imported at the top, modules imported inside functions) by the file, relative ones resolved."""
    tree = ast.parse(path.read_text())
    top_level = {id(n) for n in tree.body}
    top, nested = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        (top.update(names) if id(node) in top_level else nested.extend(names))
    return top, nested


def test_the_model_modules_import_each_other_only_at_the_top_and_without_a_cycle():
    graph = {}
    for module, rel in MODELS.items():
        top, nested = _imports(ZICO / rel, module.rsplit(".", 1)[0])
        assert not [n for n in nested if n in MODELS], f"{rel}: function-level import of a model module"
        graph[module] = {n for n in top if n in MODELS and n != module}

    def visit(node, path):
        assert node not in path, f"import circle: {' -> '.join(path + [node])}"
        for nxt in graph[node]:
            visit(nxt, path + [node])

    for module in graph:
        visit(module, [])
    assert graph["zico.cluster.models"] >= {"zico.jobs.models", "zico.jobs.events"}  # the scan sees imports
