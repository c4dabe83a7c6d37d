"""Deploy-test helpers: the ``load_script`` fixture loads a file of scripts/ (not a package) as a module."""
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(file_name: str, module_name: str):
    """``scripts/<file_name>`` imported as ``module_name`` (registered in sys.modules, which dataclasses need
    to resolve their annotations)."""
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / file_name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_script():
    return _load
