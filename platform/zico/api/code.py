"""Code archives API: upload a project (multipart, tar.gz or zip) for a job to run a command in; list and read
the caller's tenants' archives. Checks: Note [Code archive limits] (zico_contracts/codearchive.py); storage:
Note [Storing an upload] (zico/jobs/code.py). A refused upload is a 400 naming the member and the problem
(413 over ``ZICO_CODE_MAX_BYTES``) and stores nothing.
"""
from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from zico.jobs.code import ArchiveTooLarge, store_archive
from zico.jobs.models import CodeArchive
from zico.tenants.models import Role, Tenant
from zico_contracts.codearchive import ArchiveError

from .access import require_role

UPLOAD_SLACK_BYTES = 64 * 1024  # multipart headers and form fields around the archive's bytes


class CodeArchiveSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    uploaded_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = CodeArchive
        fields = ["id", "sha256", "size_bytes", "files", "unpacked_bytes", "format", "tenant", "uploaded_by",
                  "created_at"]
        read_only_fields = fields


class CodeUploadSerializer(serializers.Serializer):
    """Body of POST /api/code/ (multipart/form-data)."""

    archive = serializers.FileField(help_text="the project directory as tar.gz or zip")
    tenant = serializers.SlugField(required=False, help_text="tenant slug; optional when you can submit to one")


def upload_tenant(request, slug: str | None) -> Tenant:
    """The tenant an upload (or a job) goes to: the named one among the caller's, else their only one where
    they have role member or higher. Raises a 400 naming ``tenant``, or 403 for a role too low."""
    user = request.user
    if slug:
        tenant = Tenant.objects.for_user(user).filter(slug=slug).first()
        if tenant is None:
            raise serializers.ValidationError({"tenant": [f"no tenant {slug!r} among yours"]})
    else:
        can = [t for t in Tenant.objects.for_user(user) if t.has_role(user, Role.MEMBER)]
        if len(can) != 1:
            raise serializers.ValidationError({"tenant": [f"required: you can submit to {len(can)} tenants; "
                                                          "name one by slug"]})
        tenant = can[0]
    require_role(tenant, user, Role.MEMBER, "uploading code")
    return tenant


class CodeArchiveViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = CodeArchiveSerializer
    parser_classes = [MultiPartParser]  # the upload is multipart/form-data; the other actions have no body

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return CodeArchive.objects.none()
        user = self.request.user
        qs = CodeArchive.objects.select_related("tenant", "uploaded_by")
        return qs if getattr(user, "is_staff", False) else qs.filter(tenant__memberships__user=user)

    @extend_schema(request={"multipart/form-data": CodeUploadSerializer},
                   responses={201: CodeArchiveSerializer, 200: CodeArchiveSerializer})
    def create(self, request, *args, **kwargs):
        """Upload a project archive (role member or higher). 201 with the new archive; 200 with the existing one
        when the tenant already has these exact bytes; 400 naming what is wrong; 413 over the size limit."""
        limit = settings.ZICO_CODE_MAX_BYTES
        length = request.META.get("CONTENT_LENGTH") or ""
        if length.isdigit() and int(length) > limit + UPLOAD_SLACK_BYTES:
            return _too_large(limit)
        body = CodeUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = upload_tenant(request, body.validated_data.get("tenant"))
        try:
            archive, created = store_archive(tenant, body.validated_data["archive"], request.user)
        except ArchiveTooLarge:
            return _too_large(limit)
        except ArchiveError as exc:
            raise serializers.ValidationError({"archive": [str(exc)]}) from None
        return Response(CodeArchiveSerializer(archive).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


def _too_large(limit: int) -> Response:
    return Response({"detail": f"the archive is over the limit of {limit} bytes (ZICO_CODE_MAX_BYTES)"},
                    status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
