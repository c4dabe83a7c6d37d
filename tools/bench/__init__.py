"""Benchmarks of the device-worker side that print ratios against a baseline measured in the same run.

* :mod:`.job_overhead` — a training step as a job process through the device agent, against the same step in a
  plain process and in a thread of a process with the shared allocator (``python -m tools.bench.job_overhead``).
* :mod:`.overhead_arms` — the two baseline processes that benchmark drives (plain, in-process).
"""
