"""Memory-curve sources both sides use, all producing ``placement.curves.MemoryCurve``:

- ``trace``: a short profiling run's allocator trace (plain records) -> curve;
- ``estimate``: a CPU estimate with fake tensors (no real memory, no GPU), ``costs`` and ``op_timing`` its clock;
  ``estimate_cache`` its cache (a hit imports no torch);
- ``snapshot``: import of a ``torch.cuda.memory._dump_snapshot`` pickle, loaded through
  ``pickle_guard`` (an opcode pre-pass that bounds memory and time, then a restricted unpickler);
  ``period`` finds a trace's repeating iteration.
"""
