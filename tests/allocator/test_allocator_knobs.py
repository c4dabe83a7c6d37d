"""The allocator's ZICO_* environment knobs (allocator/src/options.hpp): each accepted form takes
effect, and a malformed value makes the first install fail with a ZicoError naming the variable and
the accepted forms (Note [Malformed knobs fail the first install]). Options are read once per
process, so every case runs in its own interpreter."""
import json
import os
import subprocess
import sys

import pytest

from workers.nvml import parse_bytes

GiB, MiB = 1 << 30, 1 << 20

# Installs a host pool on device 1, allocates and frees once, and prints what the knobs did.
PROBE = """
import ctypes, json
import zico_allocator as za
from zico_allocator import _native
try:
    za.install_host_pool(1)
except za.ZicoError as e:
    print(json.dumps({"error": str(e), "config_error": _native.config_error()}))
    raise SystemExit(0)
lib = _native.lib()
za.drain_trace()
p = lib.zico_malloc(4096, 1, None)
lib.zico_free(p, 0, 1, None)
print(json.dumps({"budget": za.get_budget(1), "wait": za.get_budget_wait(1),
                  "traced": len(za.drain_trace()), "capacity": za.memory_stats(device=1).get("capacity_bytes"),
                  "config_error": _native.config_error()}))
"""


def probe(**knobs: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZICO_") or k == "ZICO_ALLOCATOR_BUILD_DIR"}
    env.update(knobs)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("text, expected", [
    ("8589934592", 8 * GiB), ("8GiB", 8 * GiB), ("8gib", 8 * GiB), ("8G", 8 * GiB), ("512MiB", 512 * MiB),
    ("2e9", 2_000_000_000), ("1.5GB", 1_500_000_000), ("4096B", 4096), ("512 MiB", 512 * MiB),
])
def test_budget_bytes_accepts_every_documented_form(text, expected):
    got = probe(ZICO_BUDGET_BYTES=text)
    assert got["budget"] == expected and got["config_error"] == ""
    assert parse_bytes(text) == expected  # the Python side's one parser reads the same forms alike


@pytest.mark.parametrize("text, traced", [("off", False), ("OFF", False), ("no", False), ("0", False),
                                          ("false", False), ("on", True), ("yes", True), ("1", True)])
def test_trace_accepts_every_boolean_form(text, traced):
    assert (probe(ZICO_TRACE=text)["traced"] > 0) is traced


def test_unset_and_empty_knobs_keep_the_defaults():
    for got in (probe(), probe(ZICO_BUDGET_BYTES="", ZICO_TRACE="")):
        assert got["budget"] is None and got["wait"] == 30.0 and got["traced"] > 0 and got["config_error"] == ""


@pytest.mark.parametrize("var, text, forms", [
    ("ZICO_BUDGET_BYTES", "8 gigs", "512MiB"), ("ZICO_BUDGET_BYTES", "-1", "512MiB"),
    ("ZICO_BUDGET_BYTES", "1e30", "2^60"), ("ZICO_BUDGET_BYTES", "0x10", "512MiB"),
    ("ZICO_HOST_CAPACITY_BYTES", "lots", "512MiB"),
    ("ZICO_TRACE", "maybe", "on/off"), ("ZICO_TRACE", "2", "on/off"),
    ("ZICO_BUDGET_WAIT_S", "30s", "seconds"), ("ZICO_BUDGET_WAIT_S", "-1", "seconds"),
    ("ZICO_BUDGET_WAIT_S", "inf", "seconds"),
    ("ZICO_TRACE_CAPACITY", "0", "positive integer"), ("ZICO_TRACE_CAPACITY", "1.5", "positive integer"),
    ("ZICO_AGENT_CHUNK_BYTES", "3000", "multiple of 4096"),
])
def test_malformed_knob_fails_the_first_install_naming_it(var, text, forms):
    got = probe(**{var: text})
    assert "error" in got, f"{var}={text!r} was accepted: {got}"
    assert f"{var}='{text}'" in got["error"] and "accepted" in got["error"] and forms in got["error"]
    assert got["config_error"] == got["error"]


def test_every_malformed_knob_is_named_at_once():
    got = probe(ZICO_TRACE="maybe", ZICO_BUDGET_BYTES="8 gigs")
    assert "ZICO_TRACE='maybe'" in got["error"] and "ZICO_BUDGET_BYTES='8 gigs'" in got["error"]


def test_malformed_knob_fails_agent_create_too():
    code = ("import zico_allocator as za\n"
            "try:\n    za.AgentPool(64 << 20)\nexcept za.ZicoError as e:\n    print(e)\n")
    env = dict(os.environ, ZICO_TRACE="maybe")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "ZICO_TRACE='maybe'" in out.stdout, out.stderr
