"""zico_workloads.hf_imports: transformers imported with the two import-time savings builds the same lazy-import
tables as without them, imports no SciPy for its losses, and its detection losses' matcher gives SciPy's answer."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Prints transformers' and transformers.models' lazy-import tables and whether SciPy was imported.
TABLES = """
import json, sys
if sys.argv[1] == "on":
    from zico_workloads import hf_imports
    hf_imports.install()
import transformers.models.gpt2.modeling_gpt2, transformers.models.resnet.modeling_resnet
import transformers, transformers.models
def table(m):
    return [sorted(m._modules), sorted(m._class_to_module.items()),
            sorted((k, sorted(v)) for k, v in m._object_missing_backend.items()), sorted(m.__all__)]
print(json.dumps({"scipy": "scipy" in sys.modules, "transformers": table(transformers),
                  "models": table(transformers.models)}))
"""


def run(mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", TABLES, mode], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_lazy_import_tables_are_those_of_a_plain_import_and_scipy_stays_out():
    plain, saved = run("off"), run("on")
    assert plain["scipy"] and not saved["scipy"]  # SciPy is installed: a plain import pays for it
    assert saved["transformers"] == plain["transformers"] and saved["models"] == plain["models"]
    assert len(saved["models"][1]) > 1000  # the whole models table, not an empty one


def test_the_deferred_matcher_gives_scipys_assignment():
    code = """
import sys
import numpy as np
from zico_workloads import hf_imports
hf_imports.install()
import transformers.loss.loss_utils
from transformers.loss import loss_for_object_detection as detection
assert "scipy.optimize" not in sys.modules and detection.linear_sum_assignment is hf_imports.linear_sum_assignment
cost = np.random.RandomState(0).rand(7, 5)
rows, cols = detection.linear_sum_assignment(cost)
from scipy.optimize import linear_sum_assignment
assert type(sys.modules["scipy.optimize"]) is type(sys) and sys.modules["scipy.optimize"].__name__ == "scipy.optimize"
want = linear_sum_assignment(cost)
assert rows.tolist() == want[0].tolist() and cols.tolist() == want[1].tolist()
print("ok")
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
