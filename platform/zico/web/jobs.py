"""Job pages: my jobs, the submit form, job detail and cancel, and what both submit pages share (submit_page,
submitted, rate_limited; the other page is code_jobs.py). Thin views over access.py and the models."""
from __future__ import annotations

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from zico_workloads.catalog import UnknownWorkload, get_workload, list_workloads
from zico.jobs import lifecycle
from zico.jobs.submission import JobSpecError, submit_job
from zico.jobs.transitions import CANCELLABLE, IllegalTransition, JobStatus
from zico.ratelimits import count_job_submission, job_submit_wait

from . import access
from .forms import JobSubmitForm
from .data import json_view
from .job_panels import job_statuses, panel_context, panels
from .timelines import JOB_WINDOW, WINDOWS_S

ACTIVE = (JobStatus.QUEUED, JobStatus.PROFILING, JobStatus.READY, JobStatus.PLACED, JobStatus.RUNNING,
          JobStatus.LOST)


@login_required
def job_list(request):
    """The user's tenants' jobs, newest first; ``?mine=1`` keeps only the user's own, ``?tenant=<slug>``."""
    jobs = access.visible_jobs(request.user)
    mine = request.GET.get("mine") == "1"
    if mine:
        jobs = jobs.filter(owner=request.user)
    tenant = request.GET.get("tenant", "")
    if tenant:
        jobs = jobs.filter(tenant__slug=tenant)
    jobs = list(jobs[:200])
    rows = [{"job": j, "s": s} for j, s in zip(jobs, job_statuses(jobs))]
    return render(request, "web/job_list.html", {
        "rows": rows, "mine": mine, "tenant": tenant, "active_count": sum(j.status in ACTIVE for j in jobs),
        "can_submit": access.submit_tenants(request.user).exists(),
    })


def submit_page(view):
    """A submit page: signed in, GET or POST, and 403 unless the user may submit in some tenant (role member or
    higher); the view is called as ``view(request, tenants)`` with those tenants."""
    @wraps(view)
    @login_required
    @require_http_methods(["GET", "POST"])
    def wrapper(request):
        tenants = access.submit_tenants(request.user)
        if not tenants.exists():
            raise PermissionDenied("you are not a member (role member or higher) of any tenant")
        return view(request, tenants)
    return wrapper


def submitted(request, job):
    """After a submit page stored ``job``: count it against the submission limits (only accepted ones count,
    Note [Only accepted submissions count]), say so, and go to the job's page."""
    count_job_submission(request, job.tenant)
    messages.success(request, f"Job “{job}” submitted — it is queued.")
    return redirect("web-job-detail", pk=job.pk)


def rate_limited(wait: int) -> str:
    """The submit pages' message for a refused submission (``wait`` seconds until one is allowed)."""
    return f"Too many job submissions — try again in {wait} s."


@submit_page
def job_submit(request, tenants):
    """Submit a job. The form is generated from the workload's schema; on any error nothing is stored."""
    key = request.POST.get("workload") or request.GET.get("workload") or list_workloads()[0].key
    try:
        workload = get_workload(key)
    except UnknownWorkload:
        workload = list_workloads()[0]
    changing = request.method == "POST" and request.POST.get("action") == "change-workload"
    if request.method == "POST" and not changing:
        form = JobSubmitForm(request.POST, tenants=tenants, workload=workload)
        # The same per-user and per-tenant submission limits as POST /api/jobs/ (zico.ratelimits), same counters.
        # Only accepted submissions count (Note [Only accepted submissions count]).
        wait = job_submit_wait(request, form.cleaned_data["tenant"] if form.is_valid() else None)
        if wait:  # the rate-limit message replaces the field errors' summary (template: rate_limited)
            return render(request, "web/job_submit.html", {"form": form, "workload": workload,
                                                           "rate_limited": rate_limited(wait)}, status=429)
        if form.is_valid():
            try:
                job = submit_job(tenant=form.cleaned_data["tenant"], owner=request.user, workload=workload.key,
                                 params=form.params(), budget_bytes=form.budget_bytes(),
                                 priority=form.cleaned_data["priority"], name=form.cleaned_data["name"])
            except JobSpecError as exc:
                form.add_spec_error(exc.field, exc.message)
            else:
                return submitted(request, job)
    else:
        initial = {"workload": workload.key}
        if request.method == "POST":  # switching workload keeps the tenant, name and limits typed so far
            initial.update({k: request.POST.get(k) for k in ("tenant", "name", "budget_gib", "priority")
                            if request.POST.get(k)})
        form = JobSubmitForm(initial=initial, tenants=tenants, workload=workload)
    return render(request, "web/job_submit.html", {"form": form, "workload": workload})


@login_required
def job_detail(request, pk: int):
    """Status, live memory chart, memory curve, sharing plan and delays, params, the job's event log.
    The panels are the templates of :data:`zico.web.job_panels.PANELS`, re-fetched live by the page."""
    job = access.job_for(request.user, pk)
    return render(request, "web/job_detail.html", {
        **panel_context(request.user, job), "windows": WINDOWS_S, "job_window": JOB_WINDOW,
        "params": sorted((job.params or {}).items()), "env": sorted((job.env or {}).items()),
    })


@json_view
def job_panels_data(request, pk: int):
    """The job page's panels rendered again (see job_panels.panels); polled while the page is open."""
    return panels(request.user, access.job_for(request.user, pk), request)


@login_required
@require_POST
def job_cancel(request, pk: int):
    """Cancel: the job's owner (role member or higher), a tenant admin/owner, or staff."""
    job = access.job_for(request.user, pk)
    if not access.can_cancel(request.user, job):
        raise PermissionDenied("only the job's owner or a tenant admin may cancel it")
    if job.status not in CANCELLABLE:
        messages.warning(request, f"Job “{job}” has already ended ({job.status}).")
        return redirect("web-job-detail", pk=job.pk)
    try:
        lifecycle.cancel(job, request.user, f"cancelled by {request.user.get_username()}")
    except IllegalTransition:
        messages.warning(request, f"Job “{job}” ended before it could be cancelled.")
    else:
        messages.success(request, f"Job “{job}” cancelled.")
    return redirect("web-job-detail", pk=job.pk)
