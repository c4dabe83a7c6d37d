"""Zico's tools, outside the product: the benchmarks and the real-run experiment (``tools.bench``), the
co-location check (``python -m tools.colocate``, which ``scripts/gpu-check.sh`` runs) and the crash-isolation
tests' harness (``tools.crash_harness``). They run jobs through the device worker's own agent and job process."""
