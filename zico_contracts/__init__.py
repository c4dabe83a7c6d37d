"""Wire contracts shared by both ends of a Zico connection, in one place both sides import.

Standard library only: the job process, the device agent and the web side import these modules without
pulling Django, Celery or torch (``tests/workers/test_agent_protocol.py`` checks it).

* :mod:`zico_contracts.agent` — the device agent <-> job process control protocol.
* :mod:`zico_contracts.oom` — the shared allocator's out-of-memory report (``zico_allocator.last_oom()``) as a
  sentence for failure reasons (``describe_oom``), and the rewrite of reasons that carry the report's dict repr.
"""
