"""Job submission: validate a spec against the catalog, devices and tenant quotas, then store it.

The web form, the REST API and the CLI all call :func:`submit_job`, so a spec is judged the
same way everywhere. A rejected spec raises :class:`JobSpecError` naming the field and writes
nothing; an accepted one becomes a ``queued`` Job plus one ``status_change`` Event.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import models, transaction

from zico.cluster.models import MIN_BUDGET_BYTES, Device
from zico.tenants.models import Role, Tenant

from zico_contracts import walltime

from .known import misfit
from .models import PRIORITY_MAX, PRIORITY_MIN, Event, Job
from .transitions import JobStatus


class JobSpecError(ValueError):
    """A job spec is invalid. ``field`` names the input: ``workload``, ``params.<name>``,
    ``budget_bytes``, ``priority``, ``name``, ``tenant``, ``code``, ``command`` (``command[i]``),
    ``env`` (``env.<NAME>``) or ``time_limit_s``."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def _check_int(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobSpecError(field, f"expected an integer, got {value!r}")
    return value


def validate_spec(workload: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """Params with the workload's defaults filled in.

    Raises:
        JobSpecError: field ``workload`` (unknown key) or ``params.<name>`` (outside the schema).
    """
    from zico_workloads.catalog import ParamsError, UnknownWorkload, get_workload, validate_params

    try:
        get_workload(workload)
    except UnknownWorkload as exc:
        raise JobSpecError("workload", str(exc)) from exc
    try:
        return validate_params(workload, params, data_dir=settings.ZICO_DATA_DIR)
    except ParamsError as exc:
        field = "params" if exc.field == "params" else f"params.{exc.field}"
        raise JobSpecError(field, exc.message) from exc


def refuse_known_misfit(workload: str, full_params: dict[str, Any], budget_bytes: int | None,
                        tenant_id: int | None = None) -> None:
    """Raise JobSpecError when what is stored about this workload and params says the job can never run: a
    measured peak, a remembered profiling failure or a stored estimate (Note [Known memory needs] in
    zico.jobs.known, the scheduler's own sources)."""
    refused = misfit(workload, full_params, budget_bytes, tenant_id)
    if refused is not None:
        raise JobSpecError(*refused)


def validate_code_job(tenant: Tenant, code, command: Any, env: Any) -> tuple[list[str], dict[str, str]]:
    """(command, env) of a job with code, checked by zico_contracts.codejob (Note [Job environment rule]) and, for
    a python command, by the rule the job process runs it with (zico_contracts.userjob.parse_command: an option
    it cannot run, ``-c`` or ``-O``, is refused here rather than failing the job on its device).

    Raises JobSpecError naming ``code`` (not an archive of ``tenant``, or requirements no environment may have:
    :func:`check_code_requirements`), ``command``/``command[i]`` or
    ``env``/``env.<NAME>``.
    """
    from zico_contracts.codejob import CodeSpecError, validate_command, validate_env
    from zico_contracts.userjob import CommandError, parse_command

    if code is None or getattr(code, "tenant_id", None) != tenant.pk:
        raise JobSpecError("code", f"no code archive {getattr(code, 'pk', code)!r} in tenant {tenant.slug}")
    try:
        checked = validate_command(command), validate_env(env)
    except CodeSpecError as exc:
        raise JobSpecError(exc.field, exc.message) from exc
    try:
        parse_command(checked[0])
    except CommandError as exc:
        raise JobSpecError("command", str(exc)) from exc
    check_code_requirements(code)
    return checked


def check_code_requirements(code) -> None:
    """Refuse a project whose ``requirements.txt`` / ``pyproject.toml`` breaks the environment rule
    (zico_contracts.jobenv: options, URLs, another torch...), before its job is stored. Raises JobSpecError("code")."""
    from zico_contracts.jobenv import RequirementsError, requirements_in_archive

    try:
        requirements_in_archive(code.path, code.format)
    except RequirementsError as exc:
        raise JobSpecError("code", f"the project's requirements cannot be built: {exc}") from exc
    except OSError as exc:  # the stored archive is missing: the worker could not fetch it either
        raise JobSpecError("code", f"code archive {code.pk} cannot be read: {exc}") from exc


def code_identity(code, command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """A command job's identity, stored where a catalog job has its params: the same code (its archive's sha256),
    command and env is an identical job (known.identical), so a rerun reuses the stored curve; a snapshot
    uploaded for an identity (zico.jobs.snapshots) is keyed on it too. The worker reads the code fields."""
    return {"code_sha256": code.sha256, "command": command, "env": env}


def submit_job(*, tenant: Tenant, owner, workload: str = "", params: dict[str, Any] | None = None,
               budget_bytes: int | None = None, priority: int = 0, name: str = "", code=None,
               command: list[str] | None = None, env: dict[str, str] | None = None,
               time_limit_s: float | None = None) -> Job:
    """Validate and store a new queued job: a catalog ``workload`` with ``params``, or a ``command`` in the
    project ``code`` (a CodeArchive of ``tenant``) with ``env``.

    Args:
        tenant: the tenant that owns the job; ``owner`` must be a member with role member or higher.
        workload: catalog key (``zico_workloads.catalog``); empty for a job with code.
        params: workload params; checked against the workload's JSON Schema, defaults filled in.
        code, command, env: a job with code (:func:`validate_code_job`); not with a workload.
        budget_bytes: the most bytes the job may hold; at least ``MIN_BUDGET_BYTES`` (64 MiB) and at
            most the largest device's ``total_bytes`` (unchecked while no device is registered).
            Required when the tenant has a ``max_total_budget_bytes`` quota.
        priority: PRIORITY_MIN..PRIORITY_MAX, higher goes first.
        time_limit_s: the most wall-clock seconds the job's process may run (> 0; None: its tenant's
            ``max_time_limit_s``, else ``ZICO_JOB_TIME_LIMIT_S``). The least of those set is stored with its source
            (``Job.time_limit_s``, ``time_limit_source``); a request above the tenant's maximum or the platform's
            limit is refused, not cut.
    Raises:
        PermissionDenied: ``owner`` is not a member of ``tenant`` with role member or higher.
        JobSpecError: naming the field, for an unknown workload, params outside the schema, both or
            neither of workload and code, a bad command or env, a budget below ``MIN_BUDGET_BYTES`` or above
            the largest device, a known need that fits nowhere or an identical job's remembered profiling
            failure (:func:`refuse_known_misfit`), an exceeded quota, or a ``time_limit_s`` that is not a positive
            number of seconds or is above its tenant's ``max_time_limit_s`` or ``ZICO_JOB_TIME_LIMIT_S``.
    """
    if not tenant.has_role(owner, Role.MEMBER):
        raise PermissionDenied(f"{owner} may not submit jobs to {tenant.slug} (role member or higher needed)")
    name = (name or "").strip()
    if len(name) > 200:
        raise JobSpecError("name", "at most 200 characters")
    priority = _check_int("priority", priority)
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise JobSpecError("priority", f"must lie in [{PRIORITY_MIN}, {PRIORITY_MAX}], got {priority}")
    if code is not None or command is not None or env:
        if workload:
            raise JobSpecError("workload", "a job is either a catalog workload or a command in a project (code), "
                                           "not both")
        if params:
            raise JobSpecError("params", "params belong to a catalog workload; a job with code takes env")
        command, env = validate_code_job(tenant, code, command, env)
        full_params = code_identity(code, command, env)
    else:
        if not workload:
            raise JobSpecError("workload", "required: a catalog key, or code and a command")
        full_params = validate_spec(workload, params)
        command, env = [], {}
    if budget_bytes is not None:
        budget_bytes = _check_int("budget_bytes", budget_bytes)
        if budget_bytes <= 0:
            raise JobSpecError("budget_bytes", f"must be a positive number of bytes, got {budget_bytes}")
        if budget_bytes < MIN_BUDGET_BYTES:
            raise JobSpecError("budget_bytes", f"{budget_bytes} bytes is below the floor of {MIN_BUDGET_BYTES} "
                                               f"bytes ({MIN_BUDGET_BYTES >> 20} MiB)")
        largest = Device.objects.largest_total_bytes()
        if largest is not None and budget_bytes > largest:
            raise JobSpecError("budget_bytes", f"{budget_bytes} bytes exceeds the largest device's total "
                                               f"of {largest} bytes")
    if time_limit_s is not None and not walltime.positive_seconds(time_limit_s):
        raise JobSpecError("time_limit_s", f"must be a positive number of seconds, got {time_limit_s!r}")
    refuse_known_misfit(workload, full_params, budget_bytes, tenant.pk)
    with transaction.atomic():
        # Lock the tenant row so concurrent submissions cannot both squeeze under the quota.
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        quota = locked.max_total_budget_bytes
        if quota is not None:
            if budget_bytes is None:
                raise JobSpecError("budget_bytes", f"required: tenant {locked.slug} has a total budget quota "
                                                   f"of {quota} bytes")
            used = locked.jobs.unfinished().aggregate(s=models.Sum("budget_bytes"))["s"] or 0
            if used + budget_bytes > quota:
                raise JobSpecError("budget_bytes", f"quota exceeded: tenant {locked.slug} has {used} of {quota} "
                                                   f"bytes budgeted by unfinished jobs; {budget_bytes} more "
                                                   f"does not fit")
        limit = resolve_time_limit(locked, time_limit_s)
        iterations = full_params.get("iterations")
        job = Job.objects.create(tenant=locked, owner=owner, name=name, workload=workload or "", params=full_params,
                                 code=code, command=command, env=env, budget_bytes=budget_bytes, priority=priority,
                                 total_iterations=iterations if isinstance(iterations, int) else None,
                                 time_limit_s=limit.seconds if limit else None,
                                 time_limit_source=limit.source if limit else "")
        Event.record(Event.Kind.STATUS_CHANGE, job=job, actor=owner, reason="submitted",
                     **{"from": None, "to": JobStatus.QUEUED})
    return job


def resolve_time_limit(tenant: Tenant, time_limit_s: float | None) -> walltime.WallLimit | None:
    """A new job's wall-clock limit (seconds, with its source): the least of its request ``time_limit_s``, the
    tenant's ``max_time_limit_s`` and ``settings.ZICO_JOB_TIME_LIMIT_S`` (zico_contracts.walltime.resolve).

    Raises:
        JobSpecError: ``time_limit_s`` above the tenant's maximum or the platform's limit, naming both values
            (refused rather than cut: a job must not run shorter than its owner asked without saying so).
    """
    platform_s, tenant_s = settings.ZICO_JOB_TIME_LIMIT_S, tenant.max_time_limit_s
    if time_limit_s is not None:
        if tenant_s is not None and time_limit_s > tenant_s:
            raise JobSpecError("time_limit_s", f"{time_limit_s:g} s is above tenant {tenant.slug}'s maximum of "
                                               f"{tenant_s:g} s ({walltime.format_duration(tenant_s)}) "
                                               f"(max_time_limit_s)")
        if time_limit_s > platform_s:
            raise JobSpecError("time_limit_s", f"{time_limit_s:g} s is above the platform's maximum of "
                                               f"{platform_s:g} s ({walltime.format_duration(platform_s)}) "
                                               f"(ZICO_JOB_TIME_LIMIT_S)")
    return walltime.resolve(job_s=time_limit_s, tenant_s=tenant_s, platform_s=platform_s)
