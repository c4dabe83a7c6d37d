"""Wire contracts shared by both ends of a Zico connection, in one place both sides import.

Standard library only: the job process, the device agent and the web side import these modules without
pulling Django, Celery or torch (``tests/workers/test_agent_protocol.py`` checks it).

* :mod:`zico_contracts.agent` — the device agent <-> job process control protocol.
* :mod:`zico_contracts.codejob` — a job that is a command in a project: command and env rules, the run-spec
  code fields, the job token header.
* :mod:`zico_contracts.codearchive` — code archives: the upload checks and safe extraction (both ends).
* :mod:`zico_contracts.joblog` — a job's output lines: the Redis stream's key, fields and cap.
* :mod:`zico_contracts.oom` — the shared allocator's out-of-memory report (``zico_allocator.last_oom()``) as a
  sentence for failure reasons (``describe_oom``), and the rewrite of reasons that carry the report's dict repr.
"""
