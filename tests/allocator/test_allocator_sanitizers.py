"""Builds the C++ stress binaries with AddressSanitizer+UBSan and with ThreadSanitizer, and runs them:
stress.cpp — 4 threads bound to 3 jobs allocating, verifying, cross-thread freeing, marking, changing
the budget and reading every report; agent_stress.cpp — the agent pool across job processes. Any
sanitizer report fails the test."""
import os
import subprocess

import pytest

from zico_allocator import build

SANITIZER_ENV = {
    "address": {"ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0",
                "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"},
    "thread": {"TSAN_OPTIONS": "halt_on_error=1:second_deadlock_stack=1"},
}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("sanitizer", ["address", "thread"])
def test_stress_binary_runs_clean_under_sanitizer(sanitizer):
    binary = build.build_stress(sanitizer)
    env = {**os.environ, **SANITIZER_ENV[sanitizer]}
    proc = subprocess.run([str(binary), "4", "3000", "7"], capture_output=True, text=True, env=env, timeout=600)
    report = proc.stdout[-3000:] + proc.stderr[-6000:]
    assert proc.returncode == 0, report
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, report
    assert "4 threads x 3000 ops, 0 failures" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("sanitizer", ["address", "thread"])
def test_agent_stress_runs_clean_under_sanitizer(sanitizer):
    """allocator/stress/agent_stress.cpp: an agent and three job processes (two threads each) under a
    changing budget, one job killed midway; every chunk back at the end, held never past capacity."""
    binary = build.build_stress(sanitizer, "zico_agent_stress")
    env = {**os.environ, **SANITIZER_ENV[sanitizer]}
    proc = subprocess.run([str(binary), "3", "600", "5"], capture_output=True, text=True, env=env, timeout=600)
    report = proc.stdout[-3000:] + proc.stderr[-6000:]
    assert proc.returncode == 0, report
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, report
    assert "3 jobs x 2 threads x 600 ops, 0 failures" in proc.stdout, report
