"""Tenants, their members' roles and API tokens.

A tenant owns jobs; users act in a tenant through a Membership whose role decides what they may do:

    owner > admin > member > viewer
    viewer  — reads the tenant's jobs, devices and events
    member  — also submits jobs and cancels its own jobs
    admin   — also cancels any of the tenant's jobs and manages members (not owners)
    owner   — also grants and removes the owner role

Quotas (``max_running_jobs``, ``max_total_budget_bytes``, ``share_weight``, ``max_time_limit_s``) are set by cluster staff (Django
``is_staff``), not by the tenant itself; see zico/api/tenants.py.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import IntegrityError, models, transaction
from django.utils import timezone

from zico.jobs.events import Event


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# Rank of each role; a higher rank includes every right of the lower ones.
ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}


class RoleError(ValueError):
    """A membership change is not allowed (e.g. removing the last owner); ``field`` names the input."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


SHARE_WEIGHT_MIN, SHARE_WEIGHT_MAX = 1e-3, 1000.0  # a tenant's fair-share weight; bounds both inclusive


class TenantQuerySet(models.QuerySet):
    def for_user(self, user) -> "TenantQuerySet":
        """Tenants ``user`` is a member of (any role)."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(memberships__user=user).distinct()


class Tenant(models.Model):
    """A team sharing the cluster: owns jobs, has members, quotas and a co-location policy."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50, unique=True)
    # How many of the tenant's jobs may be placed or running at once (enforced by the scheduler).
    max_running_jobs = models.PositiveIntegerField(default=4, validators=[MinValueValidator(0)])
    # Sum of budget_bytes over the tenant's unfinished jobs; null means no limit. When set, every
    # job must declare a budget (checked at submission, see Job.objects.submit).
    max_total_budget_bytes = models.BigIntegerField(
        null=True, blank=True, validators=[MinValueValidator(0)],
        help_text="Bytes; sum of budgets over unfinished jobs. Empty = no limit.",
    )
    # The most wall-clock seconds one of its jobs may run (zico_contracts.walltime); null means no tenant limit
    # (the platform's ZICO_JOB_TIME_LIMIT_S still holds). A job asking for more is refused at submission.
    max_time_limit_s = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Seconds; the longest one of its jobs may run (wall clock). Empty = no tenant limit.",
    )
    # Weight in the scheduler's weighted fair share of device-memory-seconds (placement.tenancy).
    # Bounded: a weight of 1e308 made every other tenant's share round to zero (placement.tenancy divides by
    # the sum of weights), so one typo starved the cluster.
    share_weight = models.FloatField(default=1.0, validators=[MinValueValidator(SHARE_WEIGHT_MIN),
                                                              MaxValueValidator(SHARE_WEIGHT_MAX)],
                                     help_text=f"fair-share weight in [{SHARE_WEIGHT_MIN}, {SHARE_WEIGHT_MAX:g}]; "
                                               "twice the weight, twice the share")
    # Jobs of different tenants share a device (and a worker process) only when both allow it.
    allow_cross_tenant_colocation = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(max_total_budget_bytes__isnull=True) | models.Q(max_total_budget_bytes__gte=0),
                name="tenant_budget_quota_non_negative",
            ),
            models.CheckConstraint(condition=models.Q(share_weight__gt=0), name="tenant_share_weight_positive"),
            models.CheckConstraint(condition=models.Q(max_time_limit_s__isnull=True) | models.Q(max_time_limit_s__gt=0),
                                   name="tenant_time_limit_positive"),
        ]

    def __str__(self) -> str:
        return self.slug

    def role_of(self, user) -> str | None:
        """The role of ``user`` in this tenant, or None for a non-member."""
        if not getattr(user, "is_authenticated", False):
            return None
        m = self.memberships.filter(user=user).only("role").first()
        return m.role if m else None

    def has_role(self, user, at_least: str) -> bool:
        """True when ``user`` is a member whose role is ``at_least`` or higher."""
        role = self.role_of(user)
        return role is not None and ROLE_RANK[Role(role)] >= ROLE_RANK[Role(at_least)]

    def owner_count(self) -> int:
        return self.memberships.filter(role=Role.OWNER).count()

    @transaction.atomic
    def change(self, *, actor=None, **changes) -> list[str]:
        """Apply ``changes`` (field -> value) and record one Event per kind of change.

        Quota fields (``max_running_jobs``, ``max_total_budget_bytes``, ``max_time_limit_s``) record a quota_change
        Event; ``name`` and ``allow_cross_tenant_colocation`` a tenant_change Event. Values are
        validated with the model's validators first. Returns the names of fields that changed.

        Raises:
            django.core.exceptions.ValidationError: a value is out of range (keyed by field).
            ValueError: an unknown or read-only field.
        """
        unknown = set(changes) - set(QUOTA_FIELDS) - set(SETTINGS_FIELDS)
        if unknown:
            raise ValueError(f"not a changeable tenant field: {', '.join(sorted(unknown))}")
        old = {f: getattr(self, f) for f in changes}
        for f, v in changes.items():
            setattr(self, f, v)
        self.full_clean(exclude=[f.name for f in self._meta.fields if f.name not in changes], validate_unique=False)
        changed = [f for f in changes if old[f] != changes[f]]
        if not changed:
            return []
        self.save(update_fields=changed)
        for kind, fields in ((Event.Kind.QUOTA_CHANGE, QUOTA_FIELDS), (Event.Kind.TENANT_CHANGE, SETTINGS_FIELDS)):
            mine = [f for f in changed if f in fields]
            if mine:
                Event.record(kind, tenant=self, actor=actor, old={f: old[f] for f in mine},
                             new={f: changes[f] for f in mine})
        return changed

    @transaction.atomic
    def add_member(self, user, role: str, *, actor=None) -> "Membership":
        """Add ``user`` with ``role``; records a role_change Event. Raises RoleError if already a member."""
        role = _check_role(role)
        taken = RoleError("user", f"{user.get_username()} is already a member of {self.slug}")
        if self.memberships.filter(user=user).exists():
            raise taken
        try:
            with transaction.atomic():  # a concurrent add of the same user loses on the unique constraint
                m = Membership.objects.create(tenant=self, user=user, role=role)
        except IntegrityError:
            raise taken from None
        Event.record(Event.Kind.ROLE_CHANGE, tenant=self, actor=actor,
                     user=user.get_username(), old_role=None, new_role=role)
        return m


QUOTA_FIELDS = ("max_running_jobs", "max_total_budget_bytes", "share_weight",  # set by cluster staff
                "max_time_limit_s")
SETTINGS_FIELDS = ("name", "allow_cross_tenant_colocation")  # set by the tenant's owners and admins


def _check_role(role: str) -> str:
    if role not in Role.values:
        raise RoleError("role", f"{role!r} is not a role (expected one of {', '.join(Role.values)})")
    return role


class Membership(models.Model):
    """``user`` belongs to ``tenant`` with ``role``. Change roles with :meth:`set_role`."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__slug", "user__username"]
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"

    @transaction.atomic
    def set_role(self, role: str, *, actor=None) -> None:
        """Change the role; records a role_change Event.

        Raises:
            RoleError: unknown role, or the change would leave the tenant without an owner.
        """
        role = _check_role(role)
        # Lock the tenant's memberships so two concurrent demotions cannot both pass the check,
        # and judge by the roles as they are now, not as this object last saw them.
        locked = {m.pk: m.role for m in Membership.objects.select_for_update().filter(tenant_id=self.tenant_id)}
        if self.pk not in locked:
            raise RoleError("user", f"{self.user.get_username()} is no longer a member of {self.tenant.slug}")
        old = self.role = locked[self.pk]
        if old == role:
            return
        if old == Role.OWNER and list(locked.values()).count(Role.OWNER) <= 1:
            raise RoleError("role", f"{self.user.get_username()} is the last owner of {self.tenant.slug}")
        self.role = role
        self.save(update_fields=["role"])
        Event.record(Event.Kind.ROLE_CHANGE, tenant=self.tenant, actor=actor,
                     user=self.user.get_username(), old_role=old, new_role=role)

    @transaction.atomic
    def remove(self, *, actor=None) -> None:
        """Remove the member; records a role_change Event (new_role None). Raises RoleError for the last owner."""
        locked = {m.pk: m.role for m in Membership.objects.select_for_update().filter(tenant_id=self.tenant_id)}
        if self.pk not in locked:
            return  # already removed
        self.role = locked[self.pk]
        if self.role == Role.OWNER and list(locked.values()).count(Role.OWNER) <= 1:
            raise RoleError("user", f"{self.user.get_username()} is the last owner of {self.tenant.slug}")
        Event.record(Event.Kind.ROLE_CHANGE, tenant=self.tenant, actor=actor,
                     user=self.user.get_username(), old_role=self.role, new_role=None)
        self.delete()


# -- API tokens -------------------------------------------------------------------------------
TOKEN_PREFIX_LEN = 8   # hex characters, public, indexed for lookup
TOKEN_SECRET_BYTES = 32  # 256 bits of randomness: a plain SHA-256 is a sufficient hash (no salt/KDF needed)


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def active(self) -> "ApiTokenQuerySet":
        return self.filter(revoked_at__isnull=True)


class ApiToken(models.Model):
    """A personal API token. Only the SHA-256 of the secret is stored; the full token
    (``zico_<prefix>_<secret>``) is returned once by :meth:`issue` and never again."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, validators=[RegexValidator(r"\S", "name must not be blank")])
    prefix = models.CharField(max_length=TOKEN_PREFIX_LEN, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} (zico_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    @classmethod
    def issue(cls, user, name: str) -> tuple["ApiToken", str]:
        """Create a token for ``user``; returns (token row, full token string shown once)."""
        name = (name or "").strip()
        if not name:
            raise ValueError("name: a token needs a non-blank name")
        for _ in range(5):  # prefix collisions are ~1 in 4e9; retry rather than fail
            prefix = secrets.token_hex(TOKEN_PREFIX_LEN // 2)
            if not cls.objects.filter(prefix=prefix).exists():
                break
        secret = secrets.token_urlsafe(TOKEN_SECRET_BYTES)
        token = cls.objects.create(user=user, name=name[:100], prefix=prefix, secret_hash=_hash_secret(secret))
        return token, f"zico_{prefix}_{secret}"

    @classmethod
    def authenticate(cls, raw: str) -> "ApiToken | None":
        """The active token matching ``raw`` (``zico_<prefix>_<secret>``), or None.

        Updates ``last_used_at`` (at most once a minute, to spare a write per request).
        """
        parts = (raw or "").split("_", 2)
        if len(parts) != 3 or parts[0] != "zico" or len(parts[1]) != TOKEN_PREFIX_LEN:
            return None
        token = cls.objects.active().select_related("user").filter(prefix=parts[1]).first()
        if token is None or not hmac.compare_digest(token.secret_hash, _hash_secret(parts[2])):
            return None
        now = timezone.now()
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            cls.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return token

    def revoke(self) -> None:
        """Revoke the token (idempotent); a revoked token never authenticates again."""
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=self.revoked_at)
