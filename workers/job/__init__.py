"""The job side: the only code that runs inside a job process (``python -m workers.job.entry``), and the only
part of ``workers/`` the sandbox mounts. It imports ``zico_contracts``, ``zico_job``, ``zico_workloads``, the
allocator binding, torch, numpy and the standard library, never the worker's host side
(``tests/checks/test_import_purity.py``)."""
