"""Jobs API: list, retrieve, submit, cancel, events, profile (read, or attach a snapshot: zico.api.curves), memory
timeline — scoped to the caller's tenants (cluster staff see all)."""
from __future__ import annotations

from django.db.models import Prefetch
from drf_spectacular.utils import (OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field,
                                   extend_schema_view)
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from zico.cluster.models import Placement
from zico.jobs import lifecycle
from zico.jobs.models import PRIORITY_MAX, PRIORITY_MIN, CodeArchive, Job, MemoryProfile
from zico.jobs.submission import JobSpecError, submit_job
from zico.jobs.transitions import CANCELLABLE, IllegalTransition
from zico.ratelimits import ApiUseThrottle, JobSubmitUserThrottle, check_job_submit_tenant, count_job_submission
from zico.tenants.models import Role, Tenant

from .access import field_error, require_role
from .curves import SnapshotUploadSerializer, attach_snapshot
from .conditional import etag_of, mark, not_modified, with_body_etag
from .fields import FormJSONField, ReasonField, SecondsField, StrictIntegerField
from .job_outputs import AFTER, LIMIT, JobFileSerializer, LogPageSerializer, log_page
from .job_rows import PageRows, fast_path_supported, page_sql_text
from .events import EventSerializer, paginated_events
from .timelines import CURSOR, JOB_TIMELINE, JOB_WINDOW_PARAM, job_timeline_data


@extend_schema_field({"type": "object", "additionalProperties": {}})
class ObjectJSONField(FormJSONField):
    """A JSON field documented as an object (DRF's JSONField shows as "any"); what is not an object is
    refused by the workload's params check, with its own message (zico.jobs.submission.validate_spec)."""


class ProfileSummarySerializer(serializers.ModelSerializer):
    class Meta:
        model = MemoryProfile
        fields = ["id", "source", "peak_bytes", "persistent_bytes", "iteration_s", "created_at"]
        read_only_fields = fields


class ProfileSerializer(ProfileSummarySerializer):
    curve = serializers.DictField(read_only=True, help_text="the memory curve (placement.curves contract)")

    class Meta(ProfileSummarySerializer.Meta):
        fields = [*ProfileSummarySerializer.Meta.fields, "curve"]
        read_only_fields = fields


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class ArgvJSONField(FormJSONField):
    """A command (argv) documented as a list of strings; its rules are zico_contracts.codejob's, checked by
    submit_job so that a bad item is named (``command[2]``)."""


@extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
class EnvJSONField(FormJSONField):
    """An environment (NAME -> value) documented as an object of strings (Note [Job environment rule])."""


class JobSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    device = serializers.SerializerMethodField(help_text="id of the device of the job's active placement")
    profile = serializers.SerializerMethodField(help_text="the latest memory profile's headline figures")
    params = serializers.DictField(read_only=True, help_text="the workload's params, defaults filled in")
    metrics = serializers.DictField(read_only=True, help_text="iterations_per_s, peak_bytes, delay_s, slowdown, ...")
    code = serializers.IntegerField(source="code_id", read_only=True, allow_null=True,
                                    help_text="id of the code archive a command job runs in (null: a catalog job)")
    command = serializers.ListField(child=serializers.CharField(allow_blank=True), read_only=True,
                                    help_text="argv of a job with code ([] for a catalog job)")
    env = serializers.DictField(child=serializers.CharField(allow_blank=True), read_only=True,
                                help_text="environment of a job with code")
    failure_reason = ReasonField(read_only=True, help_text="why the job failed, in words (empty unless failed)")

    class Meta:
        model = Job
        fields = ["id", "tenant", "owner", "name", "workload", "params", "code", "command", "env",
                  "budget_bytes", "time_limit_s", "time_limit_source", "priority", "status",
                  "created_at", "updated_at", "status_changed_at", "started_at", "finished_at", "failure_reason",
                  "waiting_reason", "waiting_kind", "waiting_since",
                  "metrics", "attempts", "lost_count", "progress_iteration", "total_iterations", "device", "profile"]
        read_only_fields = fields

    def get_device(self, job) -> int | None:
        active = job.active_placements if hasattr(job, "active_placements") else [job.active_placement()]
        return active[0].device_id if active and active[0] else None

    @extend_schema_field(ProfileSummarySerializer(allow_null=True))
    def get_profile(self, job):
        latest = (job.profiles_newest_first[:1] or [None])[0] if hasattr(job, "profiles_newest_first") \
            else job.profiles.defer("curve").order_by("-created_at", "-id").first()
        return ProfileSummarySerializer(latest).data if latest else None


class JobSubmitSerializer(serializers.Serializer):
    """Input of POST /api/jobs/: a catalog ``workload`` with ``params``, or ``code`` (an archive id from
    POST /api/code/) with a ``command`` and ``env``. Types are checked here; meaning (catalog, command and env
    rules, devices, quota) by submit_job."""

    tenant = serializers.SlugField(required=False, help_text="tenant slug; optional when you can submit to one")
    name = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    workload = serializers.CharField(max_length=64, required=False, default="",
                                     help_text="catalog key, see /api/workloads/ (not with code)")
    params = ObjectJSONField(required=False, default=dict, help_text="workload params (its JSON Schema)")
    code = StrictIntegerField(required=False, allow_null=True, default=None,
                              help_text="id of a code archive of the tenant (POST /api/code/)")
    command = ArgvJSONField(required=False, default=None, help_text="argv run in the project, e.g. "
                                                                    '["python", "train.py"] (with code)')
    env = EnvJSONField(required=False, default=None, help_text="NAME -> value for the command (with code; "
                                                               "ZICO_*, LD_*, PYTHON* and a few more are refused)")
    budget_bytes = StrictIntegerField(required=False, allow_null=True, default=None,
                                      help_text="bytes (a JSON integer); > 0, at most the largest device's total")
    priority = StrictIntegerField(required=False, default=0, min_value=PRIORITY_MIN, max_value=PRIORITY_MAX)
    time_limit_s = SecondsField(
        required=False, allow_null=True, default=None,
        help_text="seconds (> 0) the job's process may run, wall clock, before the device agent stops it and it "
                  "fails; at most the tenant's max_time_limit_s and the platform's ZICO_JOB_TIME_LIMIT_S "
                  "(above either: 400). Null: the lesser of those")

    def validate_tenant(self, slug: str) -> Tenant:
        tenant = Tenant.objects.for_user(self.context["request"].user).filter(slug=slug).first()
        if tenant is None:
            raise serializers.ValidationError(f"no tenant {slug!r} among yours")
        return tenant

    def validate(self, attrs):
        if "tenant" not in attrs:
            user = self.context["request"].user
            can = [t for t in Tenant.objects.for_user(user) if t.has_role(user, Role.MEMBER)]
            if len(can) != 1:
                raise serializers.ValidationError({"tenant": ["required: you can submit to "
                                                              f"{len(can)} tenants; name one by slug"]})
            attrs["tenant"] = can[0]
        return attrs


@extend_schema_view(
    list=extend_schema(parameters=[
        OpenApiParameter("status", str, description="only jobs in this status"),
        OpenApiParameter("tenant", str, description="only this tenant's jobs (slug)"),
        OpenApiParameter("If-None-Match", str, OpenApiParameter.HEADER,
                         description="the ETag of the page you have: 304 with no body while it is unchanged"),
    ], responses={200: JobSerializer(many=True),
                  304: OpenApiResponse(description="not modified: the page is the one of your If-None-Match")}),
    create=extend_schema(request=JobSubmitSerializer, responses={201: JobSerializer}),
)
class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                 viewsets.GenericViewSet):
    serializer_class = JobSerializer

    def get_queryset(self):
        qs = Job.objects.visible_to(self.request.user)
        if self.action == "list":
            if s := self.request.query_params.get("status"):
                qs = qs.filter(status=s)
            if t := self.request.query_params.get("tenant"):
                qs = qs.filter(tenant__slug=t)
            if fast_path_supported(self.get_serializer_class()):
                return qs  # read as rows by list() (Note [Job list fast path])
        return qs.select_related("tenant", "owner").prefetch_related(
            Prefetch("placements", Placement.objects.active().order_by("-started_at"), to_attr="active_placements"),
            Prefetch("profiles", MemoryProfile.objects.defer("curve").order_by("-created_at", "-id"),
                     to_attr="profiles_newest_first"),
        )

    def list(self, request, *args, **kwargs):
        """One page of the caller's jobs, newest first, as JobSerializer writes them (built from rows, Note
        [Job list fast path]); with an ETag computed before the page is built, so that a poller whose page
        has not changed gets 304 for the price of one statement (Note [Job list ETag])."""
        serializer_class = self.get_serializer_class()
        if not fast_path_supported(serializer_class):
            return super().list(request, *args, **kwargs)  # the ETag is then the body's (finalize_response)
        page = PageRows(self.filter_queryset(self.get_queryset()), serializer_class, ProfileSummarySerializer)
        offset, limit = self.paginator.get_offset(request), self.paginator.get_limit(request)
        window = slice(offset, offset + limit)
        sql, url = page_sql_text(serializer_class, ProfileSummarySerializer), request.build_absolute_uri()
        if "HTTP_IF_NONE_MATCH" in request.META:  # a poller: answer from the hash alone if it still matches
            count, stamp = page.count_and_stamp(window)
            if response := not_modified(request, etag_of(sql, url, count, stamp)):
                return response
        count, stamp, _rows = page.read(window)  # the paginator's slice of ``page`` answers these rows
        etag = etag_of(sql, url, count, stamp)
        return not_modified(request, etag) or mark(self.get_paginated_response(self.paginate_queryset(page)), etag)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if self.action == "list" and request.method == "GET":
            response = with_body_etag(request, response)  # unless list() marked it already
        return response

    def get_throttles(self):
        # Rate limits (zico/ratelimits.py): submissions also count per user; per tenant in create().
        if self.action == "create":
            return [ApiUseThrottle(), JobSubmitUserThrottle()]
        return super().get_throttles()

    def create(self, request, *args, **kwargs):
        spec = JobSubmitSerializer(data=request.data, context={"request": request})
        spec.is_valid(raise_exception=True)
        d = spec.validated_data
        require_role(d["tenant"], request.user, Role.MEMBER, "submitting a job")
        check_job_submit_tenant(request, d["tenant"])  # 429 once the tenant's submission rate is spent
        code = None
        try:
            if d["code"] is not None:
                code = CodeArchive.objects.filter(pk=d["code"], tenant=d["tenant"]).first()
                if code is None:
                    raise JobSpecError("code", f"no code archive {d['code']} in tenant {d['tenant'].slug}")
            elif d["command"] is not None or d["env"] is not None:
                raise JobSpecError("code", "required with a command: upload the project with POST /api/code/")
            job = submit_job(tenant=d["tenant"], owner=request.user, workload=d["workload"], params=d["params"],
                             budget_bytes=d["budget_bytes"], priority=d["priority"], name=d["name"], code=code,
                             command=d["command"], env=d["env"], time_limit_s=d["time_limit_s"])
        except JobSpecError as exc:
            raise field_error(exc.field, exc.message) from exc
        count_job_submission(request, d["tenant"])  # only accepted submissions count (zico.ratelimits)
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel the job: its owner (role member+), a tenant admin/owner or staff. 409 if it already ended."""
        job = self.get_object()
        if not job.can_be_cancelled_by(request.user):
            raise exceptions.PermissionDenied("cancelling needs the job's owner (role member or higher), "
                                              f"an admin of {job.tenant.slug}, or cluster staff")
        if job.status not in CANCELLABLE:
            return Response({"detail": f"job {job.pk} has already ended ({job.status})"},
                            status=status.HTTP_409_CONFLICT)
        try:
            lifecycle.cancel(job, request.user, f"cancelled by {request.user.get_username()}")
        except IllegalTransition as exc:  # it ended between our read and the locked write
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(JobSerializer(job).data)

    @extend_schema(responses={200: EventSerializer(many=True)},
                   parameters=[OpenApiParameter("kind", str, description="only events of this kind")])
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        """The job's audit trail: status changes, placements, delays, OOMs prevented, worker losses."""
        return paginated_events(self, request, self.get_object().events.all())

    @extend_schema(methods=["GET"], responses={200: ProfileSerializer})
    @extend_schema(methods=["POST"], request={"multipart/form-data": SnapshotUploadSerializer},
                   responses={201: ProfileSerializer},
                   description="Attach a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot()) as the curve of a "
                               "job with code, so it is not profiled (queued) or its reruns are not (ended): its "
                               "owner, a tenant admin or staff. 201 with the stored profile; 400 naming what is wrong "
                               "with the file; 409 while the job is profiled, placed or running; 413 over "
                               "ZICO_SNAPSHOT_MAX_BYTES.")
    @action(detail=True, methods=["get", "post"], parser_classes=[MultiPartParser])
    def profile(self, request, pk=None):
        """The job's latest memory profile with its full curve (placement.curves contract); 404 if none yet."""
        if request.method == "POST":
            return attach_snapshot(request, self.get_object())
        latest = self.get_object().latest_profile()
        if latest is None:
            raise exceptions.NotFound("this job has no memory profile yet")
        return Response(ProfileSerializer(latest).data)

    @extend_schema(responses={200: LogPageSerializer}, parameters=[AFTER, LIMIT])
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        """The job's output lines after ``?after=`` (live from Redis while it runs, then its stored copy), with
        its progress; poll with the answer's ``cursor`` until ``complete``."""
        return Response(log_page(request, self.get_object()))

    @extend_schema(responses={200: JobFileSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)  # the whole list (a few hundred at most)
    def files(self, request, pk=None):
        """The job's output files (uploaded by its worker), by path; download each from its ``url``."""
        return Response(JobFileSerializer(self.get_object().files.all(), many=True).data)

    @extend_schema(responses={200: JOB_TIMELINE}, parameters=[JOB_WINDOW_PARAM, CURSOR])
    @action(detail=True, methods=["get"])
    def timeline(self, request, pk=None):
        """The job's allocated/reserved bytes over time, stored and live (as the job page's chart): the last
        ``window`` seconds (default 900), or ``window=job`` for the job's own span."""
        return Response(job_timeline_data(request, self.get_object()))
