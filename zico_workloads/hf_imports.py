"""Two import-time savings for a process that builds transformers models (the fake-tensor estimate).

Neither changes an object a model is built from or a figure of an estimate; both are skipped (the
import runs as usual) if transformers was imported before :func:`install`, or if the names they
rely on are gone (another transformers version).

Note [One scan of transformers' model folders]
``import transformers`` builds its lazy-import table by reading every file under ``transformers/models``
(``transformers.utils.import_utils.create_import_structure_from_path``, ~1,100 folders and ~3,400 files),
and importing any model's module (``transformers.models.gpt2.modeling_gpt2``) imports the package
``transformers.models``, whose ``__init__`` reads them all again for its own table (0.16 s of CPU
each time, measured alone on 2 loaded cores). :func:`install` memoises that function per folder from
its first call, so the second table is built from the first scan's results (deep copies, 0.07 s:
the tables are equal to those without it, and share no set).

Note [SciPy deferred for transformers' detection losses]
``transformers.modeling_utils`` imports ``transformers.loss.loss_utils``, which imports six detection
losses, each running ``from scipy.optimize import linear_sum_assignment`` when SciPy is installed:
SciPy's optimize, linalg, sparse, special and fft packages, 2.6 of the 30 s ``python -X importtime``
counted for a cold GPT-2 estimate's imports on loaded cores, for a function only a detection loss
calls. While a module of ``transformers.loss`` runs, ``scipy.optimize`` (if not imported yet) is a stand-in whose
``linear_sum_assignment`` imports SciPy's on its first call and calls it with the same arguments;
any other name read from it imports the real module. The stand-in is gone when the module has run.
"""
from __future__ import annotations

import copy
import functools
import importlib
import importlib.abc
import os
import sys
import types
from typing import Any, Callable

_IMPORT_UTILS = "transformers.utils.import_utils"
_SCAN = "create_import_structure_from_path"
_LOSSES = "transformers.loss."
_OPTIMIZE = "scipy.optimize"


def _memoised(scan: Callable[[Any], dict]) -> Callable[[Any], dict]:
    cache: dict[str, dict] = {}

    @functools.wraps(scan)
    def once(module_path):
        folder = os.fspath(module_path)
        if os.path.isfile(folder):  # as the function does: a file stands for its folder
            folder = os.path.dirname(folder)
        key = os.path.realpath(folder)
        if key not in cache:
            cache[key] = scan(module_path)
        return copy.deepcopy(cache[key])

    once.zico_memoised = True
    return once


def _memoise_scan(module: types.ModuleType) -> None:
    scan = getattr(module, _SCAN, None)
    if callable(scan) and not getattr(scan, "zico_memoised", False):
        setattr(module, _SCAN, _memoised(scan))


def linear_sum_assignment(*args, **kwargs):
    """``scipy.optimize.linear_sum_assignment(*args, **kwargs)``, SciPy imported on the first call."""
    from scipy.optimize import linear_sum_assignment as solve

    return solve(*args, **kwargs)


class _DeferredOptimize(types.ModuleType):
    """Stand-in for ``scipy.optimize`` while a module of ``transformers.loss`` runs."""

    def __init__(self) -> None:
        super().__init__(_OPTIMIZE)
        self.linear_sum_assignment = linear_sum_assignment

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if sys.modules.get(_OPTIMIZE) is self:
            del sys.modules[_OPTIMIZE]
        return getattr(importlib.import_module(_OPTIMIZE), name)


def _run_with_deferred_optimize(run: Callable[[types.ModuleType], None], module: types.ModuleType) -> None:
    if _OPTIMIZE in sys.modules:
        return run(module)
    stand_in = _DeferredOptimize()
    sys.modules[_OPTIMIZE] = stand_in
    try:
        run(module)
    finally:
        if sys.modules.get(_OPTIMIZE) is stand_in:
            del sys.modules[_OPTIMIZE]


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``transformers.utils.import_utils`` and the modules of ``transformers.loss`` with the finders after
    it, and wraps their loader's ``exec_module`` as the two notes say."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _IMPORT_UTILS and not fullname.startswith(_LOSSES):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module
        if fullname == _IMPORT_UTILS:
            def exec_module(module):
                run(module)
                _memoise_scan(module)
        else:
            def exec_module(module):
                _run_with_deferred_optimize(run, module)
        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Install both savings for this process (Note [One scan of transformers' model folders], Note [SciPy
    deferred for transformers' detection losses]). Idempotent; does nothing once transformers is imported."""
    if "transformers" in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())
