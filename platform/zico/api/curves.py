"""Memory curves from users' PyTorch snapshots: the upload's fields and checks shared by ``POST
/api/jobs/{id}/profile/`` (a job's curve, zico.api.jobs) and ``/api/curves/`` (curves uploaded for a job identity, its
code, command and env, before any such job runs: list, read, upload). Rules: zico.jobs.snapshots (Note [A snapshot is
its tenant's word], Note [When a snapshot may be attached]). A refused upload is a 400 naming the problem (413 over
``ZICO_SNAPSHOT_MAX_BYTES``) and stores nothing."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from zico.jobs.models import CodeArchive, Job, MemoryProfile
from zico.jobs.snapshots import (SnapshotConflict, SnapshotRefused, SnapshotTooLarge, attach_to_job, check_attachable,
                                 max_bytes, read_snapshot, store_for_identity)
from zico.jobs.submission import JobSpecError, validate_code_job

from .access import field_error
from .code import upload_tenant
from .fields import FormJSONField, StrictIntegerField

UPLOAD_SLACK_BYTES = 512 * 1024  # multipart headers and the form fields beside the file (an env may take 256 KiB)


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class ArgvFormField(FormJSONField):
    """A command (argv) as JSON text in a form (``["python", "train.py"]``); its rules are zico_contracts.codejob's."""


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class EnvFormField(FormJSONField):
    """An environment (NAME -> value) as JSON text in a form (``{"SEED": "1"}``)."""


class SnapshotUploadSerializer(serializers.Serializer):
    """Body of POST /api/jobs/{id}/profile/ (multipart/form-data)."""

    snapshot = serializers.FileField(help_text="a torch.cuda.memory._dump_snapshot() pickle, at most "
                                               "ZICO_SNAPSHOT_MAX_BYTES (default 32 MiB)")
    device = StrictIntegerField(required=False, allow_null=True, default=None, min_value=0, max_value=65535,
                                help_text="index into the snapshot's device_traces; default: the device with the "
                                          "most events")


class CurveUploadSerializer(SnapshotUploadSerializer):
    """Body of POST /api/curves/ (multipart/form-data): the snapshot and the identity of the jobs it serves."""

    tenant = serializers.SlugField(required=False, help_text="tenant slug; optional when you can submit to one")
    code = StrictIntegerField(help_text="id of a code archive of the tenant (POST /api/code/)")
    command = ArgvFormField(help_text='argv as JSON text, e.g. ["python", "train.py"]')
    env = EnvFormField(required=False, default=None, help_text='NAME -> value as JSON text, e.g. {"SEED": "1"}')


class IdentityCurveSerializer(serializers.ModelSerializer):
    """A curve uploaded for a job identity: identical jobs of its tenant take it instead of being profiled."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    uploaded_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    code_sha256 = serializers.SerializerMethodField(help_text="sha256 of the code archive of the jobs it serves")
    command = serializers.SerializerMethodField(help_text="argv of the jobs it serves")
    env = serializers.SerializerMethodField(help_text="environment of the jobs it serves")

    class Meta:
        model = MemoryProfile
        fields = ["id", "tenant", "code_sha256", "command", "env", "source", "peak_bytes", "persistent_bytes",
                  "iteration_s", "uploaded_by", "created_at"]
        read_only_fields = fields

    def get_code_sha256(self, p) -> str:
        return p.identity["code_sha256"]

    @extend_schema_field({"type": "array", "items": {"type": "string"}})
    def get_command(self, p):
        return p.identity["command"]

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
    def get_env(self, p):
        return p.identity["env"]


class IdentityCurveDetailSerializer(IdentityCurveSerializer):
    curve = serializers.DictField(read_only=True, help_text="the memory curve (placement.curves contract)")

    class Meta(IdentityCurveSerializer.Meta):
        fields = [*IdentityCurveSerializer.Meta.fields, "curve"]
        read_only_fields = fields


def too_large(request) -> Response | None:
    """413 for a request whose declared length alone is over the snapshot limit (before its body is read)."""
    length = request.META.get("CONTENT_LENGTH") or ""
    limit = max_bytes()
    if length.isdigit() and int(length) > limit + UPLOAD_SLACK_BYTES:
        return too_large_response(f"the snapshot is over the limit of {limit} bytes (ZICO_SNAPSHOT_MAX_BYTES)")
    return None


def too_large_response(message: str) -> Response:
    return Response({"detail": message}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)


def read_upload(data: dict):
    """The curve of the validated upload ``data`` (SnapshotUploadSerializer); SnapshotRefused/TooLarge as read."""
    f = data["snapshot"]
    return read_snapshot(f, data["device"], name=getattr(f, "name", "") or "")


def attach_snapshot(request, job: Job) -> Response:
    """POST /api/jobs/{id}/profile/: attach an uploaded snapshot's curve to ``job`` (the view has scoped it)."""
    if not job.can_be_cancelled_by(request.user):
        raise exceptions.PermissionDenied("attaching a snapshot needs the job's owner (role member or higher), an "
                                          f"admin of {job.tenant.slug}, or cluster staff")
    if refused := too_large(request):
        return refused
    body = SnapshotUploadSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    try:
        check_attachable(job)  # before the snapshot is read
        profile = attach_to_job(job, read_upload(body.validated_data), request.user)
    except SnapshotTooLarge as exc:
        return too_large_response(exc.message)
    except SnapshotRefused as exc:
        raise exceptions.ValidationError({"snapshot": [exc.message]}) from None
    except SnapshotConflict as exc:
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    from .jobs import ProfileSerializer

    return Response(ProfileSerializer(profile).data, status=status.HTTP_201_CREATED)


class CurveViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Curves uploaded for job identities in the caller's tenants (staff: all), newest first."""

    parser_classes = [MultiPartParser]  # the upload is multipart/form-data; the reads have no body

    def get_serializer_class(self):
        return IdentityCurveSerializer if self.action == "list" else IdentityCurveDetailSerializer

    def get_queryset(self):
        qs = MemoryProfile.objects.filter(job__isnull=True).select_related("tenant", "uploaded_by")
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return qs.none()
        if self.action == "list":
            qs = qs.defer("curve")
        user = self.request.user
        return qs if getattr(user, "is_staff", False) else qs.filter(tenant__memberships__user=user)

    @extend_schema(request={"multipart/form-data": CurveUploadSerializer}, responses={201: IdentityCurveDetailSerializer})
    def create(self, request, *args, **kwargs):
        """Upload a snapshot for the jobs of a tenant that will run ``command`` with ``env`` in the archive ``code``
        (role member or higher): such jobs, and reruns of them, are not profiled. 201 with the curve; 400 naming
        what is wrong; 413 over ZICO_SNAPSHOT_MAX_BYTES."""
        if refused := too_large(request):
            return refused
        body = CurveUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        tenant = upload_tenant(request, d.get("tenant"))
        code = CodeArchive.objects.filter(pk=d["code"], tenant=tenant).first()
        try:
            validate_code_job(tenant, code, d["command"], d["env"])  # before the snapshot is read
            profile = store_for_identity(tenant, code, d["command"], d["env"], read_upload(d), request.user)
        except JobSpecError as exc:
            raise field_error(exc.field, exc.message) from None
        except SnapshotTooLarge as exc:
            return too_large_response(exc.message)
        except SnapshotRefused as exc:
            raise exceptions.ValidationError({"snapshot": [exc.message]}) from None
        return Response(IdentityCurveDetailSerializer(profile).data, status=status.HTTP_201_CREATED)
