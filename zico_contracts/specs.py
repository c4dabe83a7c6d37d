"""The specs of the device tasks ``zico.device.run_job`` and ``zico.device.profile_job``: one class each, built by
the web side (``Placement.run_spec``, ``Job.profile_spec``) and parsed by the worker (``workers.tasks``).

A task's arguments are ``(job_id, spec)``: the job id travels beside the spec, the spec is a JSON object.

Run spec (:class:`RunSpec`)::

    workload        str         catalog key, e.g. "digits-cnn"; "" for a job with code
    params          obj         the workload's params (checked again by the worker against the catalog schema)
    placement       int | null  the placement this run belongs to (a stale one is aborted by the web side)
    run_token       str | null  the placement's random token: with the placement id it names the run across
                                deployments (a done record with another token is another database's)
    curve           obj | null  the job's memory curve (placement.curves contract) for the coordinator
    plan            obj         the placement's sharing plan (placement.state.SharingPlan.to_dict())
    job_created_at  str | null  the job's creation time, ISO 8601 (names the job across deployments)
    tenant          int | null  the job's tenant id (the pool scrubs a chunk that moves to another tenant)
    job_budget_bytes int | null the job's own budget: the most bytes the device agent lets its process hold
                                (Note [A job's own budget] in the allocator's agent_server.cpp); null: none
    job_budget_default bool     (absent: false) job_budget_bytes is the platform's default bound of a script
                                without a budget profiled beside other jobs, not the job's own
                                (zico_contracts.jobbudget); the agent lifts it once the job's curve is stored
    wall_limit      obj | null  the job's hard wall-clock limit, {"seconds": number > 0, "source": "job" |
                                "tenant" | "platform"} (zico_contracts.walltime): the device agent stops its
                                process that long after launch and fails the job naming it; null or absent: none
    + for a job with code, the fields of zico_contracts.codejob.CodeSpec (code_url, command, job_token, ...)

Profile spec (:class:`ProfileSpec`)::

    workload, params, tenant, job_budget_bytes, wall_limit   as above
    time_limit_s    number | null  stop the run after the first iteration past it (null: no limit): a soft
                                   stop the job process applies at an iteration boundary, beside wall_limit
    warmup, steady  int            iterations before the traced ones, and traced ones (defaults 1 and 3)
    + the code fields, as above

``from_dict`` raises :class:`SpecError` naming the field (``job_id``, ``spec``, ``workload``, ``params``,
``placement``, ..., or a code field such as ``command[2]``); ``to_dict`` checks what it builds the same way, so the
web side never sends a spec the worker would refuse. Standard library only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zico_contracts import jobbudget
from zico_contracts.codejob import CodeSpec, CodeSpecError
from zico_contracts.walltime import FIELD as WALL_LIMIT, WallLimit, WallLimitError


class SpecError(ValueError):
    """A run or profile spec is malformed; ``field`` names the input, and the message starts with it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def _job_id(job_id: Any) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise SpecError("job_id", f"expected a positive integer, got {job_id!r}")
    return job_id


def _common(spec: Any) -> tuple[CodeSpec | None, str, dict[str, Any], int | None]:
    """The fields both specs share: (code, workload, params, tenant). Raises SpecError."""
    if not isinstance(spec, dict):
        raise SpecError("spec", f"expected a JSON object, got {type(spec).__name__}")
    try:
        code = CodeSpec.from_spec(spec)  # None for a catalog job
    except CodeSpecError as exc:
        raise SpecError(exc.field, exc.message) from None
    workload = spec.get("workload")
    if not isinstance(workload, str) or (not workload and code is None):
        raise SpecError("workload", "missing or not a string")
    params = spec.get("params") or {}
    if not isinstance(params, dict):
        raise SpecError("params", "expected a JSON object")
    tenant = spec.get("tenant")
    if tenant is not None and (isinstance(tenant, bool) or not isinstance(tenant, int) or tenant <= 0):
        raise SpecError("tenant", f"expected a positive integer id, got {tenant!r}")
    return code, workload, params, tenant


def _job_budget(spec: dict) -> int | None:
    """``job_budget_bytes``: a positive int (bytes) or None. Raises SpecError naming it."""
    value = spec.get("job_budget_bytes")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise SpecError("job_budget_bytes", f"expected a positive number of bytes, got {value!r}")
    return value


def _budget_default(spec: dict, budget: int | None, profile: dict | None) -> bool:
    """``job_budget_default`` (zico_contracts.jobbudget.SPEC_FIELD): absent or a bool, true only with a
    ``job_budget_bytes`` and a ``profile`` (the bound is a profiled script's). Raises SpecError naming it."""
    value = spec.get(jobbudget.SPEC_FIELD, False)
    if not isinstance(value, bool):
        raise SpecError(jobbudget.SPEC_FIELD, f"expected true or false, got {value!r}")
    if value and (budget is None or profile is None):
        raise SpecError(jobbudget.SPEC_FIELD, "a default bound needs job_budget_bytes and profile (a script profiled "
                                              "as its run starts)")
    return value


def _wall_limit(spec: dict) -> WallLimit | None:
    """``wall_limit``: a :class:`zico_contracts.walltime.WallLimit` or None. Raises SpecError naming it."""
    try:
        return WallLimit.from_dict(spec.get(WALL_LIMIT))
    except WallLimitError as exc:
        raise SpecError(exc.field, exc.message) from None


def _wall_limit_field(limit: WallLimit | None) -> dict[str, Any]:
    return {WALL_LIMIT: limit.to_dict()} if limit is not None else {}


def _optional_text(spec: dict, key: str) -> str | None:
    """``spec[key]``: None when absent, else a non-empty string; raises SpecError naming ``key``."""
    value = spec.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise SpecError(key, f"expected a non-empty string, got {value!r}")
    return value


def _code_fields(code: CodeSpec | None) -> dict[str, Any]:
    return code.to_spec() if code is not None else {}


@dataclass
class RunSpec:
    """The spec of ``zico.device.run_job`` (JSON; module docstring).

    Attributes:
        job: job id (the task's ``job_id`` argument).
        workload: catalog key, e.g. ``"digits-cnn"``.
        params: workload params (validated again by the worker against the catalog schema).
        placement: id of the placement this run belongs to (stale runs are aborted by the web side).
        run_token: the placement's random ``run_token`` (a UUID string). With the placement id it names this
            run across deployments: a done record carrying another token was left by an earlier database
            (ids restart at 1) and does not stop this run. None when the sender does not set one.
        curve: the job's memory curve (DESIGN contract) for the coordinator; None disables gating.
        plan: the placement's sharing plan (``job_ids``, ``predicted_slowdown`` per job, ``budget_bytes``, ...).
        job_created_at: the job's creation time (ISO 8601): with the id it names the job across deployments,
            so a checkpoint left by an earlier database's job of the same id is not resumed
            (Note [Checkpoints across deployments] in workers.job.checkpoints). None when the sender does not set it.
        tenant: the job's tenant id. The agent's pool scrubs a chunk that moves to another tenant's job
            (docs/allocator.md, Note: scrub); None (an older sender) counts as tenant 0.
        code: the code fields of a command job (a user's own script), else None.
        profile: a script job profiled as its run starts (Note [A script's profile is the start of its run] in
            workers.runner): ``{"warmup", "steady", "time_limit_s"}`` (iterations, iterations, seconds or None);
            None for a job that has its curve (and for every catalog job, which profile_job profiles).
        job_budget_bytes: the job's own budget (bytes), which the device agent never lets its process pass;
            None: only the device's budget holds it.
        job_budget_default: True when ``job_budget_bytes`` is not the job's own but the platform's default bound of
            a script without a budget profiled beside other jobs (zico_contracts.jobbudget): the agent holds it
            the same way until the job's curve is stored, then lifts it. Only with ``job_budget_bytes`` and
            ``profile``.
        wall_limit: the job's hard wall-clock limit (seconds since its process was launched, and its source), which
            the device agent enforces (Note [A job's wall-clock limit] in workers.agent.agent); None: none.
    """

    job: int
    workload: str
    params: dict[str, Any]
    placement: int | None = None
    run_token: str | None = None
    curve: dict[str, Any] | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    job_created_at: str | None = None
    tenant: int | None = None
    code: CodeSpec | None = None  # a command job (a user's own script), else None
    profile: dict[str, Any] | None = None
    job_budget_bytes: int | None = None
    wall_limit: WallLimit | None = None
    job_budget_default: bool = False

    @classmethod
    def from_dict(cls, job_id: Any, spec: Any) -> "RunSpec":
        """Parse the task's arguments. Raises SpecError naming the field."""
        job_id = _job_id(job_id)
        code, workload, params, tenant = _common(spec)
        placement = spec.get("placement", spec.get("placement_id"))
        if placement is not None and (isinstance(placement, bool) or not isinstance(placement, int)):
            raise SpecError("placement", f"expected an integer id, got {placement!r}")
        run_token = _optional_text(spec, "run_token")
        curve = spec.get("curve")
        if curve is not None and not isinstance(curve, dict):
            raise SpecError("curve", "expected a memory curve object")
        plan = spec.get("plan") or {}
        if not isinstance(plan, dict):
            raise SpecError("plan", "expected a JSON object")
        budget, profile = _job_budget(spec), _profile(spec, code)
        return cls(job_id, workload, params, placement, run_token, curve, plan, _optional_text(spec, "job_created_at"),
                   tenant, code, profile, budget, _wall_limit(spec), _budget_default(spec, budget, profile))

    parse = from_dict  # the worker's older name

    def to_dict(self) -> dict[str, Any]:
        """The JSON spec (without the job id, which is the task's first argument). Raises SpecError, naming
        the field, when this spec would be refused by :meth:`from_dict`."""
        out = {"workload": self.workload, "params": self.params, "placement": self.placement,
               "run_token": self.run_token, "curve": self.curve, "plan": self.plan,
               "job_created_at": self.job_created_at, "tenant": self.tenant, **_code_fields(self.code)}
        if self.job_budget_bytes is not None:
            out["job_budget_bytes"] = self.job_budget_bytes
        if self.job_budget_default:
            out[jobbudget.SPEC_FIELD] = True
        if self.profile is not None:
            out["profile"] = self.profile
        out.update(_wall_limit_field(self.wall_limit))
        type(self).from_dict(self.job, out)
        return out


def _profile(spec: dict, code: CodeSpec | None) -> dict[str, Any] | None:
    """The run spec's ``profile`` with its defaults, or None; raises SpecError naming the bad field (a profile
    for a catalog job, which profile_job profiles, is one)."""
    prof = spec.get("profile")
    if prof is None:
        return None
    if not isinstance(prof, dict):
        raise SpecError("profile", "expected a JSON object")
    if code is None:
        raise SpecError("profile", "only a job with code is profiled as its run starts")
    out = {"warmup": prof.get("warmup", ProfileSpec.DEFAULT_WARMUP), "steady": prof.get("steady", ProfileSpec.DEFAULT_STEADY),
           "time_limit_s": prof.get("time_limit_s")}
    for name, least in (("warmup", 0), ("steady", 1)):
        v = out[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise SpecError(f"profile.{name}", f"expected an integer >= {least}, got {v!r}")
    limit = out["time_limit_s"]
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0):
        raise SpecError("profile.time_limit_s", f"expected a positive number of seconds, got {limit!r}")
    return out


@dataclass
class ProfileSpec:
    """The spec of ``zico.device.profile_job`` (module docstring); ``job`` is the task's ``job_id`` argument."""

    job: int
    workload: str
    params: dict[str, Any]
    time_limit_s: float | None = None
    tenant: int | None = None
    warmup: int | None = None  # None: DEFAULT_WARMUP
    steady: int | None = None  # None: DEFAULT_STEADY
    code: CodeSpec | None = None
    job_budget_bytes: int | None = None  # as in RunSpec
    wall_limit: WallLimit | None = None  # as in RunSpec

    DEFAULT_WARMUP = 1
    DEFAULT_STEADY = 3

    @classmethod
    def from_dict(cls, job_id: Any, spec: Any) -> "ProfileSpec":
        """Parse the task's arguments. Raises SpecError naming the field."""
        job_id = _job_id(job_id)
        code, workload, params, tenant = _common(spec)
        limit = spec.get("time_limit_s")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0):
            raise SpecError("time_limit_s", f"expected a positive number of seconds, got {limit!r}")
        counts = {}
        for name, least in (("warmup", 0), ("steady", 1)):
            value = spec.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise SpecError(name, f"expected an integer >= {least}, got {value!r}")
            counts[name] = value
        return cls(job_id, workload, params, limit, tenant, counts["warmup"], counts["steady"], code, _job_budget(spec),
                   _wall_limit(spec))

    @property
    def warmup_iterations(self) -> int:
        return self.DEFAULT_WARMUP if self.warmup is None else self.warmup

    @property
    def steady_iterations(self) -> int:
        return self.DEFAULT_STEADY if self.steady is None else self.steady

    def to_dict(self) -> dict[str, Any]:
        """The JSON spec (without the job id); ``warmup``/``steady`` only when set. Raises SpecError, naming
        the field, when this spec would be refused by :meth:`from_dict`."""
        counts = {name: getattr(self, name) for name in ("warmup", "steady") if getattr(self, name) is not None}
        out = {"workload": self.workload, "params": self.params, "time_limit_s": self.time_limit_s,
               "tenant": self.tenant, **counts, **_code_fields(self.code)}
        if self.job_budget_bytes is not None:
            out["job_budget_bytes"] = self.job_budget_bytes
        out.update(_wall_limit_field(self.wall_limit))
        type(self).from_dict(self.job, out)
        return out
