"""The estimate computes what the code before its speed-ups computed: every case of
scripts/estimate_reference.py against data/estimate_reference.json, which that script wrote from the
checkout before them (commit bc75623). Exact: peak and persistent bytes, every byte value of the curve
and, for CUDA targets (a deterministic clock), every fraction and the iteration time."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import estimate_reference  # noqa: E402  (the script that wrote the reference)

REFERENCE = json.loads((Path(__file__).parent / "data" / "estimate_reference.json").read_text())


@pytest.mark.parametrize("case", estimate_reference.CASES, ids=estimate_reference.case_id)
def test_the_estimate_equals_the_reference_computed_before_the_speed_ups(case, tmp_path):
    if estimate_reference.versions() != REFERENCE["versions"]:
        pytest.skip(f"reference made with {REFERENCE['versions']}, installed {estimate_reference.versions()}")
    want = REFERENCE["cases"][estimate_reference.case_id(case)]
    assert estimate_reference.compute(case, str(tmp_path)) == want
