"""The worker-facing API: a device worker fetches a job's code and uploads its output files, authenticated by
the job's token from the run spec (``Authorization: JobToken <token>``; Note [Job tokens] in zico/jobs/code.py).

* ``GET /api/worker/jobs/{id}/code`` — the archive's bytes (``application/gzip`` or ``application/zip``,
  ``ETag`` the sha256); the worker checks the sha256 and extracts with zico_contracts.codearchive;
* ``POST /api/worker/jobs/{id}/files/`` — one output file (multipart ``path``, ``file``), 201 with its row;
  the same path again replaces it; limits ``ZICO_OUTPUT_MAX_*`` (413 for sizes).

There is no log upload: the control consumer stores the job's Redis log stream when the run ends (Note [A
job's log, live then stored] in zico/jobs/outputs.py), which also covers a worker lost mid-run. A token is
refused (401) when its signature is wrong or it expired, and (403) for another job's endpoints or once the job
ended more than ``ZICO_WORKER_UPLOAD_GRACE_S`` ago.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.core import signing
from django.http import FileResponse
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from zico.jobs.code import job_id_from_token
from zico.jobs.models import Job
from zico.jobs.outputs import OutputError, store_output_file
from zico.ratelimits import count_bad_token
from zico_contracts.codejob import AUTH_SCHEME

from .job_outputs import JobFileSerializer

UPLOAD_SLACK_BYTES = 64 * 1024
CONTENT_TYPES = {"tar.gz": "application/gzip", "zip": "application/zip"}


@dataclass(frozen=True)
class JobTokenAuth:
    """``request.auth`` of a worker request: the job its token names."""

    job_id: int


class JobTokenAuthentication(BaseAuthentication):
    """``Authorization: JobToken <token>`` (zico_contracts.codejob.AUTH_SCHEME); other schemes are not ours."""

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != AUTH_SCHEME.lower().encode():
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(f"Authorization header: expected '{AUTH_SCHEME} <token>'")
        try:
            job_id = job_id_from_token(parts[1].decode("ascii"))
        except signing.SignatureExpired:
            raise exceptions.AuthenticationFailed("the job token has expired (ZICO_WORKER_TOKEN_TTL_S)") from None
        except (signing.BadSignature, UnicodeDecodeError):
            count_bad_token(request)  # 429 once this address sent too many bad tokens
            raise exceptions.AuthenticationFailed("invalid job token") from None
        return AnonymousUser(), JobTokenAuth(job_id)

    def authenticate_header(self, request):
        return f'{AUTH_SCHEME} realm="worker"'


class JobTokenScheme(OpenApiAuthenticationExtension):
    target_class = "zico.api.worker.JobTokenAuthentication"
    name = "jobToken"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": f"'{AUTH_SCHEME} <job_token>' with the job_token of the run spec"}


class IsTheJobsWorker(permissions.BasePermission):
    """A job token for the job of the URL."""

    message = "a job token is needed"

    def has_permission(self, request, view):
        auth = request.auth
        if not isinstance(auth, JobTokenAuth):
            return False
        if auth.job_id != int(view.kwargs["pk"]):
            self.message = f"this job token is for job {auth.job_id}, not {view.kwargs['pk']}"
            return False
        return True


class WorkerView(APIView):
    authentication_classes = [JobTokenAuthentication]
    permission_classes = [IsTheJobsWorker]
    throttle_classes = []  # no user to count for; bad tokens are counted per address

    def job(self, pk: int) -> Job:
        job = Job.objects.select_related("code").filter(pk=pk).first()
        if job is None:
            raise exceptions.NotFound(f"no job {pk}")
        grace = timedelta(seconds=settings.ZICO_WORKER_UPLOAD_GRACE_S)
        if job.is_finished and job.finished_at and timezone.now() - job.finished_at > grace:
            raise exceptions.PermissionDenied(f"job {pk} ended ({job.status}) more than "
                                              f"{settings.ZICO_WORKER_UPLOAD_GRACE_S} s ago")
        return job


class WorkerJobCode(WorkerView):
    @extend_schema(responses={(200, "application/gzip"): OpenApiResponse(OpenApiTypes.BINARY),
                              (200, "application/zip"): OpenApiResponse(OpenApiTypes.BINARY)},
                   operation_id="worker_jobs_code")
    def get(self, request, pk: int):
        """The job's code archive (check its sha256 against the run spec's ``code_sha256``)."""
        job = self.job(pk)
        if job.code is None or not job.code.path.exists():
            raise exceptions.NotFound(f"job {pk} has no code archive")
        response = FileResponse(open(job.code.path, "rb"), content_type=CONTENT_TYPES[job.code.format])
        response["ETag"] = f'"{job.code.sha256}"'
        return response


class OutputUploadSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=1024, trim_whitespace=False,
                                 help_text="relative POSIX path in the job's outputs")
    file = serializers.FileField(allow_empty_file=True)


class WorkerJobFiles(WorkerView):
    parser_classes = [MultiPartParser]

    @extend_schema(request={"multipart/form-data": OutputUploadSerializer}, responses={201: JobFileSerializer},
                   operation_id="worker_jobs_files_upload")
    def post(self, request, pk: int):
        """Upload one output file of the job (before the run's job_finished); the same path replaces it."""
        length = request.META.get("CONTENT_LENGTH") or ""
        if length.isdigit() and int(length) > settings.ZICO_OUTPUT_MAX_FILE_BYTES + UPLOAD_SLACK_BYTES:
            return Response({"detail": f"over the limit of {settings.ZICO_OUTPUT_MAX_FILE_BYTES} bytes per output "
                                       "file (ZICO_OUTPUT_MAX_FILE_BYTES)"}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        job = self.job(pk)
        body = OutputUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            f = store_output_file(job, body.validated_data["path"], body.validated_data["file"])
        except OutputError as exc:
            if exc.status == 413:
                return Response({"detail": str(exc)}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
            raise exceptions.ValidationError({exc.field: [exc.message]}) from None
        return Response(JobFileSerializer(f).data, status=status.HTTP_201_CREATED)
