"""Memory-curve work only a device worker can do, producing ``placement.curves.MemoryCurve``:

- ``capture``: a short profiling run of the real job through the Zico allocator, its trace turned into the curve
  (``python -m workers.curves profile``, which ``manage.py curve profile`` runs as a child process);
- ``accuracy``: profiled and estimated curves compared on this machine (docs/curve-accuracy.md);
- ``compare``: the comparison tools.

The curve sources the web side uses too (the CPU estimate and its cache, the snapshot import, the trace -> curve
step) live in :mod:`zico_workloads.curves`.
"""
