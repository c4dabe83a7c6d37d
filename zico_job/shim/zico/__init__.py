"""``import zico`` inside a Zico job process: the job-side API (``zico_job``) under the name users write.

This directory (``zico_job/shim``) is on a job's import path and the web side's ``platform/`` is not, so the
name cannot reach the Django project of the same name (see docs/workers.md, "User scripts").
"""
from zico_job import *  # noqa: F401,F403
from zico_job import __all__  # noqa: F401
