"""The "your code" submit page: upload a project archive and name the command to run in it (the page beside the
catalog form), optionally with a PyTorch memory snapshot as the job's curve (zico.jobs.snapshots: the job is then not
profiled). The same checks as the API, in this order so that a refused form stores nothing: the command and env
(zico_contracts.codejob), the snapshot (read and checked against the budget), then the archive (Note [Code archive
limits]), then the job (submit_job; a job refused there takes its freshly stored archive with it) and its curve."""
from __future__ import annotations

import re
import shlex
from decimal import Decimal

from django import forms
from django.db import transaction
from django.shortcuts import render

from zico.jobs.code import discard_archive, store_archive
from zico.jobs.models import PRIORITY_MAX, PRIORITY_MIN
from zico.jobs.snapshots import SnapshotRefused, attach_to_job, check_fits, read_snapshot
from zico.jobs.submission import JobSpecError, submit_job
from zico.ratelimits import job_submit_wait
from zico_contracts.codearchive import ArchiveError
from zico_contracts.codejob import CodeSpecError, validate_command, validate_env

from .forms import SubmitForm
from .jobs import rate_limited, submit_page, submitted

FIELD_OF = {"command": "command", "env": "env", "code": "archive", "budget_bytes": "budget_gib",
            "priority": "priority", "name": "name", "tenant": "tenant", "snapshot": "snapshot"}


class CodeJobForm(SubmitForm):
    """Tenant, name, the project archive, the command (shell words), env (NAME=value lines), budget, priority."""

    tenant = forms.ModelChoiceField(queryset=None, empty_label=None, label="Tenant")
    name = forms.CharField(max_length=200, required=False, label="Job name")
    archive = forms.FileField(label="Project archive", help_text="Your project directory as .tar.gz or .zip "
                              "(or use `zico submit DIR -- CMD`, which packs it for you).")
    command = forms.CharField(max_length=32 * 1024, label="Command", help_text="Run in the project's directory, "
                              "e.g. python train.py --epochs 3 (quoted as in a shell; no shell runs it).")
    env = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Environment",
                          help_text="One NAME=value per line; ZICO_*, LD_*, PYTHON* and a few more are reserved.")
    budget_gib = forms.DecimalField(required=False, min_value=Decimal("0.001"), max_digits=12, decimal_places=3,
                                    label="Memory budget (GiB)", help_text="Leave empty for no per-job limit.")
    priority = forms.IntegerField(initial=0, min_value=PRIORITY_MIN, max_value=PRIORITY_MAX, label="Priority")
    snapshot = forms.FileField(required=False, label="Memory snapshot (optional)",
                               help_text="A torch.cuda.memory._dump_snapshot() pickle of this command's run: the job "
                                         "is placed with its curve instead of being profiled first, and so are its "
                                         "reruns.")

    def __init__(self, *args, tenants, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["tenant"].queryset = tenants

    def clean_command(self):
        try:
            argv = shlex.split(self.cleaned_data["command"])
        except ValueError as exc:
            raise forms.ValidationError(f"cannot split it into words: {exc}") from None
        try:
            return validate_command(argv)
        except CodeSpecError as exc:
            raise forms.ValidationError(exc.message) from None

    def clean_env(self):
        pairs = {}
        for n, line in enumerate(self.cleaned_data.get("env", "").splitlines(), 1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"line {n}: expected NAME=value")
            pairs[name.strip()] = value
        try:
            return validate_env(pairs)
        except CodeSpecError as exc:
            raise forms.ValidationError(str(exc)) from None

    def add_spec_error(self, field: str, message: str) -> None:
        target = FIELD_OF.get(re.split(r"[.\[]", field)[0])
        self.add_error(target, message if target else f"{field}: {message}")
        if target:
            self.mark(target)


@submit_page
def job_submit_code(request, tenants):
    """Submit a command in an uploaded project; on any error nothing is stored."""
    if request.method != "POST":
        return render(request, "web/job_submit_code.html", {"form": CodeJobForm(tenants=tenants)})
    form = CodeJobForm(request.POST, request.FILES, tenants=tenants)
    wait = job_submit_wait(request, form.cleaned_data["tenant"] if form.is_valid() else None)
    if wait:
        return render(request, "web/job_submit_code.html", {"form": form, "rate_limited": rate_limited(wait)},
                      status=429)
    if form.is_valid():
        d = form.cleaned_data
        try:
            curve = None
            if d["snapshot"]:
                curve = read_snapshot(d["snapshot"], name=d["snapshot"].name or "")
                check_fits(curve, form.budget_bytes())
            with transaction.atomic():
                archive, created = store_archive(d["tenant"], d["archive"], request.user)
                try:
                    job = submit_job(tenant=d["tenant"], owner=request.user, code=archive, command=d["command"],
                                     env=d["env"], budget_bytes=form.budget_bytes(), priority=d["priority"],
                                     name=d["name"])
                    if curve is not None:  # seen by the scheduler together with the job (one transaction)
                        attach_to_job(job, curve, request.user)
                except (JobSpecError, SnapshotRefused):
                    if created:
                        discard_archive(archive)
                    raise
        except ArchiveError as exc:
            form.add_error("archive", str(exc))
            form.mark("archive")
        except SnapshotRefused as exc:
            form.add_spec_error("snapshot", exc.message)
        except JobSpecError as exc:
            form.add_spec_error(exc.field, exc.message)
        else:
            return submitted(request, job)
    return render(request, "web/job_submit_code.html", {"form": form})
