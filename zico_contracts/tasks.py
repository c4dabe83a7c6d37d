"""Celery task names — the one place they are written; the web side sends by these names, the worker registers them.

=============================  ==================  ===============================================================
name                           queue               arguments -> result
=============================  ==================  ===============================================================
``zico.device.run_job``        the device's queue  ``job_id, spec`` (:class:`zico_contracts.specs.RunSpec` as a dict)
                                                   -> the run's outcome (dict)
``zico.device.profile_job``    the device's queue  ``job_id, spec`` (:class:`zico_contracts.specs.ProfileSpec` as a
                                                   dict) -> a summary; the curve itself goes by ``profile_done``
``zico.device.describe``       the device's queue  -> the worker process's facts (dict), for tests and operators
``zico.control.health``        ``control``         ``nonce`` -> ``{"ok", "nonce", "host", "pid", "time"}``
=============================  ==================  ===============================================================

Device queues are named by :func:`zico_contracts.queues.device_queue`; control tasks are routed by
:data:`CONTROL_PREFIX` (:data:`zico_contracts.queues.TASK_ROUTES`). Tasks take ids and JSON only and are
idempotent (docs/architecture.md, Contracts). Standard library only.
"""
DEVICE_PREFIX = "zico.device."
CONTROL_PREFIX = "zico.control."

RUN_JOB = DEVICE_PREFIX + "run_job"
PROFILE_JOB = DEVICE_PREFIX + "profile_job"
DESCRIBE = DEVICE_PREFIX + "describe"
HEALTH = CONTROL_PREFIX + "health"
