"""Wire contracts shared by both ends of a Zico connection, in one place both sides import.

Standard library only: the job process, the device agent and the web side import these modules without
pulling Django, Celery or torch (``tests/checks/test_import_purity.py`` checks it).

* :mod:`zico_contracts.keys` — Redis key and channel names (telemetry, control messages, heartbeats, control keys).
* :mod:`zico_contracts.queues` — Celery queue and device naming, and the control routes.
* :mod:`zico_contracts.tasks` — the Celery task names.
* :mod:`zico_contracts.specs` — the ``run_job`` and ``profile_job`` specs (``RunSpec``, ``ProfileSpec``).
* :mod:`zico_contracts.agent` — the device agent <-> job process control protocol.
* :mod:`zico_contracts.codejob` — a job that is a command in a project: command and env rules, the run-spec
  code fields, the job token header.
* :mod:`zico_contracts.codearchive` — code archives: the upload checks and safe extraction (both ends).
* :mod:`zico_contracts.joblog` — a job's output lines: the Redis stream's key, fields and cap.
* :mod:`zico_contracts.oom` — the shared allocator's out-of-memory report (``zico_allocator.last_oom()``) as a
  sentence for failure reasons (``describe_oom``), and the rewrite of reasons that carry the report's dict repr.
"""
