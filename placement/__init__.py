"""Zico's pure scheduling core: memory curves, group evaluation, time shifts, gating,
placement policies and the simulator. Imports numpy only — never Django, Celery or torch.

Entry points (see docs/placement.md):

* ``placement.curves`` — MemoryCurve, the curve contract and loader;
* ``placement.groups.plan_group`` — a group's sharing plan;
* ``placement.shifts.best_shifts`` — time shifts for jobs with equal iteration times;
* ``placement.coordinator.Coordinator`` — live gating on one device (the GPU worker's);
* ``placement.policies.FirstFitFifo`` / ``MemoryAware`` — ``decide(state) -> Decision`` (placements,
  and a ``placement.reasons.WaitReason`` per job left waiting), ``place(state) -> placements``;
* ``placement.simulator.simulate`` — a job trace on a simulated cluster.
"""
