"""The demo text corpus: real English text gathered from the docstrings Python itself ships.

Torch-free. ``ensure_corpus(data_dir)`` writes ``corpus/python-docs.txt`` under the data directory
(once; later calls reuse it). The text is the Zen of Python (the ``this`` module) followed by the
docstrings of standard-library modules, classes and functions, in a fixed order, so the file is
the same on every machine with the same Python version.
"""
from __future__ import annotations

import ast
import codecs
import importlib
import importlib.util
import inspect
import os
import warnings
from pathlib import Path

DEFAULT_CORPUS = "corpus/python-docs.txt"
# Standard-library modules whose docstrings make up the corpus (documentation-rich, import-safe).
_MODULES = (
    "argparse", "asyncio", "collections", "contextlib", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "email", "enum", "fractions", "functools", "heapq", "http.client", "inspect", "io",
    "itertools", "json", "logging", "os", "pathlib", "pickle", "random", "re", "shutil", "socket",
    "statistics", "string", "subprocess", "tarfile", "textwrap", "threading", "typing", "unittest",
    "urllib.parse", "uuid", "zipfile",
)


def zen_of_python() -> str:
    """The Zen of Python, decoded from ``this.s`` without importing ``this`` (which prints it)."""
    spec = importlib.util.find_spec("this")
    tree = ast.parse(Path(spec.origin).read_text())
    for node in tree.body:  # the literal assigned to ``s``; nothing of ``this`` is executed
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "s":
            return codecs.decode(ast.literal_eval(node.value), "rot13")
    raise LookupError("the 'this' module no longer assigns the Zen to 's'")


def corpus_text() -> str:
    """The corpus as one string (about 260 KB)."""
    parts = [zen_of_python()]
    with warnings.catch_warnings():  # some attributes (typing.re, ...) warn when touched
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in _MODULES:
            _module_docs(name, parts)
    return "\n\n".join(parts) + "\n"


def _module_docs(name: str, parts: list[str]) -> None:
    """Append the docstrings of module ``name`` and its public members to ``parts``."""
    mod = importlib.import_module(name)
    if mod.__doc__:
        parts.append(inspect.cleandoc(mod.__doc__))
    for attr in sorted(vars(mod)):
        obj = getattr(mod, attr)
        if attr.startswith("_") or getattr(obj, "__module__", None) != name:
            continue
        doc = inspect.getdoc(obj)
        if doc and len(doc) > 40:
            parts.append(doc)


def ensure_corpus(data_dir: str | Path, relpath: str = DEFAULT_CORPUS) -> Path:
    """Write the demo corpus at ``data_dir/relpath`` unless it exists; return its path.

    Raises OSError if the data directory cannot be written.
    """
    path = Path(data_dir) / relpath
    if path.is_file() and path.stat().st_size > 0:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(corpus_text(), encoding="utf-8")
    os.replace(tmp, path)  # never a half-written corpus
    return path
