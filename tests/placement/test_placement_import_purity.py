"""The placement core imports numpy only: checked in a clean interpreter."""
import subprocess
import sys
from pathlib import Path

import placement

# the checkout under test (an isolated interpreter would otherwise import the installed one)
PLATFORM = str(Path(placement.__file__).resolve().parents[1])

MODULES = ["placement", "placement.curves", "placement.state", "placement.gating", "placement.shifts",
           "placement.groups", "placement.coordinator", "placement.device_sim", "placement.tenancy",
           "placement.policies", "placement.simulator"]


def test_importing_the_core_pulls_in_no_django_celery_or_torch():
    code = (
        f"import sys\nsys.path.insert(0, {PLATFORM!r})\n"
        + "".join(f"import {m}\n" for m in MODULES)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'torch', 'zico', 'workers'))\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
