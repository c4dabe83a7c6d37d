"""A job's output over the API, for its tenant's members and staff (others: 404): the log lines
(``GET /api/jobs/{id}/logs/?after=<cursor>``, Note [A job's log, live then stored] in zico/jobs/outputs.py),
the output files (``GET /api/jobs/{id}/files/``) and one file's bytes (``GET /api/jobs/{id}/files/{path}``,
always ``application/octet-stream`` as an attachment: the bytes are the job's, never rendered as a page).
"""
from __future__ import annotations

from urllib.parse import quote

import redis
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.views import APIView

from zico.jobs.models import Job, JobFile
from zico.jobs.outputs import PAGE_MAX, read_log
from zico.web import live
from zico.web.job_panels import job_status

AFTER = OpenApiParameter("after", str, description="the previous answer's cursor: only lines after it")
LIMIT = OpenApiParameter("limit", int, description=f"lines at most (default 1000, at most {PAGE_MAX})")


class LogLineSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="stream entry id; the cursor of the line")
    t = serializers.FloatField(allow_null=True, help_text="unix seconds")
    stream = serializers.ChoiceField(choices=["stdout", "stderr", "system"])
    line = serializers.CharField(allow_blank=True)
    cut = serializers.BooleanField(help_text="the line was longer than 4096 bytes and was cut")


class JobProgressSerializer(serializers.Serializer):
    status = serializers.CharField()
    iteration = serializers.IntegerField(help_text="iterations done")
    iterations = serializers.IntegerField(allow_null=True, help_text="iterations in all, when known")
    iterations_per_s = serializers.FloatField(allow_null=True)
    eta_s = serializers.FloatField(allow_null=True, help_text="seconds left at that rate (running jobs)")
    preparing = serializers.CharField(allow_null=True, help_text="while the job's own environment is built: the "
                                      "installer's latest line (workers/jobenv.py); else null")


class LogPageSerializer(serializers.Serializer):
    lines = LogLineSerializer(many=True)
    cursor = serializers.CharField(allow_null=True, help_text="pass as ?after= for the next lines")
    more = serializers.BooleanField(help_text="more lines are ready now: ask again at once")
    source = serializers.CharField(help_text='"live" (the Redis stream) or "stored" (the copy kept when it ended)')
    complete = serializers.BooleanField(help_text="the stored copy: no line will be added")
    dropped_lines = serializers.IntegerField(help_text="earlier lines not kept")
    note = serializers.CharField(allow_blank=True, help_text="why lines are missing, if they are")
    live_ok = serializers.BooleanField(help_text="false when Redis could not be read (live lines missing)")
    job = JobProgressSerializer()


class JobFileSerializer(serializers.ModelSerializer):
    url = serializers.SerializerMethodField(help_text="where to download it")

    class Meta:
        model = JobFile
        fields = ["path", "size_bytes", "sha256", "updated_at", "url"]
        read_only_fields = fields

    def get_url(self, f) -> str:
        return f"/api/jobs/{f.job_id}/files/{quote(f.path)}"


def log_page(request, job: Job) -> dict:
    """The body of GET /api/jobs/{id}/logs/ (400 naming ``after`` or ``limit`` when malformed)."""
    raw_limit = request.query_params.get("limit")
    try:
        limit = int(raw_limit) if raw_limit not in (None, "") else 1000
    except ValueError:
        raise exceptions.ValidationError({"limit": [f"expected an integer in [1, {PAGE_MAX}]"]}) from None
    r, ok = live.client(), True
    try:
        try:
            page = read_log(job, r, request.query_params.get("after"), limit)
        except redis.RedisError:
            r, ok = None, False
            page = read_log(job, None, request.query_params.get("after"), limit)
    except ValueError as exc:
        name, _, message = str(exc).partition(": ")
        raise exceptions.ValidationError({name: [message]}) from None
    s = job_status(job)
    progress = {k: s[k] for k in ("status", "iteration", "iterations", "iterations_per_s", "eta_s")}
    env = (job.metrics or {}).get("environment")
    progress["preparing"] = str(env.get("progress") or "building") if isinstance(env, dict) and \
        env.get("state") == "preparing" and not job.is_finished else None
    return {**page, "live_ok": ok, "job": progress}


class JobFileDownload(APIView):
    """GET /api/jobs/{id}/files/{path}: one output file's bytes (tenant members and staff; others 404)."""

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiResponse(OpenApiTypes.BINARY)},
                   operation_id="jobs_files_download")
    def get(self, request, pk: int, path: str):
        job = Job.objects.visible_to(request.user).filter(pk=pk).first()
        if job is None:
            raise exceptions.NotFound("no job you may read")
        f = JobFile.objects.filter(job=job, path=path).first()
        if f is None or not f.disk_path.exists():
            raise exceptions.NotFound(f"job {job.pk} has no output file {path[:200]!r}")
        return FileResponse(open(f.disk_path, "rb"), as_attachment=True, filename=f.path.rsplit("/", 1)[-1],
                            content_type="application/octet-stream")
