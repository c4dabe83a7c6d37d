"""The allocator's out-of-memory report in words (zico_contracts.oom): reports made by the real pool (a host-backed
pool in a child process, refused by its budget and by its capacity), failure reasons carrying the report's Python
repr as device workers write it, malformed and cut-short reports, and the module's standard-library-only imports."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zico_contracts.oom import describe_oom, readable_reason

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20

# Two host pools on their own device indices (no torch): one refused by its 32 MiB budget, one by its
# 64 MiB capacity. Prints both reports of zico_allocator.last_oom() as JSON.
_MAKE_REPORTS = """
import json
import zico_allocator as za
from zico_allocator import _native
lib = _native.lib()
out = {}
za.install_host_pool(40)
za.set_budget(32 << 20, device=40)
za.set_budget_wait(0.0, device=40)
with za.bind(7):
    kept = lib.zico_malloc(20 << 20, 40, 0)
    assert kept and not lib.zico_malloc(20 << 20, 40, 0)
out["budget"] = za.last_oom(40)
za.install_host_pool(41, 64 << 20)
za.set_budget_wait(0.0, device=41)
with za.bind(8):
    assert not lib.zico_malloc(100 << 20, 41, 0)
out["capacity"] = za.last_oom(41)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def reports():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "allocator" / "python")])}
    out = subprocess.run([sys.executable, "-c", _MAKE_REPORTS], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_a_budget_refusal_reads_as_a_sentence_with_its_figures(reports):
    r = reports["budget"]
    assert r["reason"] == "budget"
    text = describe_oom(r)
    assert text.startswith("the allocator refused 20.00 MiB for job 7 on device 40: the device budget of "
                           "32.00 MiB was reached"), text
    assert "reserved " in text and "allocated 20.00 MiB, of which this job 20.00 MiB" in text
    assert "{" not in text and "'" not in text


def test_a_capacity_refusal_names_the_capacity(reports):
    text = describe_oom(reports["capacity"])
    assert "for job 8 on device 41: the device has no more memory (capacity 64.00 MiB)" in text, text


def test_a_reason_with_the_workers_dict_repr_is_rewritten(reports):
    # what an older worker appended to an out-of-memory reason: f" (allocator: {info})" with info the dict
    stored = f"OutOfMemoryError: Zico CPU pool: out of memory (allocator: {reports['budget']})"
    text = readable_reason(stored)
    assert text == ("OutOfMemoryError: Zico CPU pool: out of memory (" + describe_oom(reports["budget"]) + ")")
    assert "'reason'" not in text and "timestamp_s" not in text


def test_a_detail_with_braces_and_two_reports_are_both_read():
    agent = {"device": 0, "reason": "agent", "job": 3, "rounded_bytes": 2 * MIB, "detail": "refused {quota}) x"}
    budget = {"device": 0, "reason": "budget", "job": 4, "rounded_bytes": MIB, "budget_bytes": 1 << 30}
    text = readable_reason(f"a (allocator: {agent}) then b (allocator: {budget}) end")
    assert text == (f"a ({describe_oom(agent)}) then b ({describe_oom(budget)}) end")
    assert "the device agent refused more memory: refused {quota}) x" in text
    assert "the device budget of 1.00 GiB was reached" in text


@pytest.mark.parametrize("text", [
    "plain reason with no report",
    "cut short (allocator: {'device': 0, 'reason': 'budget', 'job': 4, 'requested",  # truncated at 2000 chars
    "not a dict (allocator: {1, 2})",
    "code is never run (allocator: {'a': __import__('os').getpid()})",
    "",
])
def test_text_without_a_readable_report_comes_back_unchanged(text):
    assert readable_reason(text) == text


def test_malformed_reports_never_raise():
    assert describe_oom("not a dict") == "not a dict"
    assert describe_oom({}) == "the allocator refused an allocation: no reason given"
    assert describe_oom({"reason": "budget", "rounded_bytes": "big", "job": True, "budget_bytes": None}) == \
        "the allocator refused an allocation: the device budget was reached"
    assert describe_oom({"reason": "fragmentation", "rounded_bytes": 4 * MIB, "free_cached_bytes": 8 * MIB,
                         "largest_free_block": 2 * MIB}) == (
        "the allocator refused 4.00 MiB: enough memory is cached free but no free block is large enough "
        "(8.00 MiB free, the largest block 2.00 MiB)")
    assert describe_oom({"reason": "new-kind"}) == "the allocator refused an allocation: reason 'new-kind'"


def test_the_module_imports_neither_django_celery_nor_torch():
    code = ("import sys, zico_contracts.oom; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'torch', 'zico')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_host_pool_reads_as_the_cpu_not_device_minus_one():
    # the CPU pool's reports carry device -1 (zico_allocator's index of the host pool)
    text = describe_oom({"device": -1, "reason": "budget", "job": 5, "rounded_bytes": MIB, "budget_bytes": 64 * MIB})
    assert text.startswith("the allocator refused 1.00 MiB for job 5 on the CPU: the device budget of 64.00 MiB"), text
    assert "-1" not in text
