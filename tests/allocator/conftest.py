"""Fixtures for the allocator tests: each test gets its own host-backed pool on a fresh device
index (pools live for the whole process), plus raw C-ABI malloc/free helpers."""
import itertools

import pytest

import zico_allocator as za
from zico_allocator import _native

_next_device = itertools.count(1)


class RawPool:
    """A host-backed Zico pool on its own device index, driven through the C ABI."""

    def __init__(self, device: int):
        self.device = device
        self.lib = _native.lib()

    def malloc(self, size: int, stream: int = 0) -> int:
        return self.lib.zico_malloc(size, self.device, stream) or 0

    def free(self, ptr: int, stream: int = 0) -> None:
        self.lib.zico_free(ptr, 0, self.device, stream)

    def stats(self, job=None) -> dict:
        return za.memory_stats(job=job, device=self.device)

    def check(self) -> None:
        za.check_invariants(self.device)


@pytest.fixture
def make_pool():
    """make_pool(capacity_bytes=None, budget_bytes=None, wait_s=0.0) -> RawPool on a fresh device."""
    def make(capacity_bytes=None, budget_bytes=None, wait_s=0.0):
        device = next(_next_device)
        assert device < 60, "ran out of device indices for test pools (60..63 are kept for fixed uses)"
        za.install_host_pool(device, capacity_bytes)
        za.set_budget(budget_bytes, device=device)
        za.set_budget_wait(wait_s, device=device)
        return RawPool(device)
    yield make
    za.bind(0).__enter__()  # leave the test thread unbound
