"""Tenant operations behind ``manage.py tenant``, the team page and ``manage.py createdemo``: create a
tenant, add a member by username (optionally creating the user), and the demo tenant and its owner.

``create_demo_tenant()`` is what ``manage.py createdemo`` (and so the set-up script) runs. Errors are
:class:`TenantError` naming the input (``slug``, ``name``, ``username``, ``role``, ``email``), raised
before anything is written.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_email, validate_slug
from django.db import IntegrityError, transaction

from .models import Role, RoleError, Tenant

DEMO_SLUG = "demo"
DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo-password-zico"


RESERVED_SLUGS = ("new",)  # /tenant/new/ is the create form's address


class TenantError(ValueError):
    """A tenant or member operation is refused; ``field`` names the input."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@transaction.atomic
def create_tenant(slug: str, name: str, *, owner=None, actor=None) -> Tenant:
    """Create tenant ``slug`` named ``name`` (optionally with ``owner``, a user, as its first owner) and
    record a tenant_change Event (``{"created": true, "new": {"slug", "name"}}``).

    Raises:
        TenantError: ``slug`` is not a slug (letters, digits, '-' and '_', at most 50), is reserved or is
            taken; ``name`` is blank or longer than 100 characters.
    """
    from zico.jobs.models import Event

    slug, name = (slug or "").strip(), (name or "").strip()
    try:
        validate_slug(slug)
    except ValidationError:
        raise TenantError("slug", f"{slug!r} is not a slug: letters, digits, '-' and '_' only") from None
    if len(slug) > 50:
        raise TenantError("slug", f"at most 50 characters, got {len(slug)}")
    if slug in RESERVED_SLUGS:
        raise TenantError("slug", f"{slug!r} is reserved")
    if not name or len(name) > 100:
        raise TenantError("name", "give a name of 1 to 100 characters")
    if Tenant.objects.filter(slug=slug).exists():
        raise TenantError("slug", f"a tenant {slug!r} already exists")
    try:
        with transaction.atomic():  # a concurrent create of the same slug loses on the unique constraint
            tenant = Tenant.objects.create(slug=slug, name=name)
    except IntegrityError:
        raise TenantError("slug", f"a tenant {slug!r} already exists") from None
    Event.record(Event.Kind.TENANT_CHANGE, tenant=tenant, actor=_actor(actor), created=True,
                 new={"slug": slug, "name": name})
    if owner is not None:
        tenant.add_member(owner, Role.OWNER, actor=_actor(actor))
    return tenant


@transaction.atomic
def add_member_by_username(tenant: Tenant, username: str, role: str, *, actor=None, create_user: bool = False,
                           email: str = ""):
    """Add the active user ``username`` to ``tenant`` with ``role``; with ``create_user`` a missing user is
    created first (no usable password: set one with ``manage.py changepassword``). Returns the Membership.

    Raises:
        TenantError: no such active user (and not ``create_user``), a bad ``email``, an unknown ``role``,
            or the user is already a member.
    """
    User = get_user_model()
    username = (username or "").strip()
    if role not in Role.values:
        raise TenantError("role", f"{role!r} is not a role (expected one of {', '.join(Role.values)})")
    user = User.objects.filter(username=username).first()
    if user is None:
        if not create_user:
            raise TenantError("username", f"no user {username!r} (create one with --create-user)")
        if email:
            try:
                validate_email(email)
            except ValidationError:
                raise TenantError("email", f"{email!r} is not an e-mail address") from None
        try:
            User.username_validator(username)
        except ValidationError as exc:
            raise TenantError("username", " ".join(exc.messages)) from None
        user = User.objects.create_user(username, email or "", None)
    elif not user.is_active:
        raise TenantError("username", f"user {username!r} is inactive")
    try:
        return tenant.add_member(user, role, actor=_actor(actor))
    except RoleError as exc:
        raise TenantError("username" if exc.field == "user" else exc.field, str(exc)) from exc


def _actor(actor):
    return actor if getattr(actor, "is_authenticated", False) else None


@dataclass(frozen=True)
class DemoLogin:
    username: str
    password: str
    tenant_slug: str
    created: bool  # False when the tenant and user already existed


@transaction.atomic
def create_demo_tenant(*, username: str = DEMO_USERNAME, password: str = DEMO_PASSWORD,
                       slug: str = DEMO_SLUG, superuser: bool = True) -> DemoLogin:
    """Create (or repair) the demo tenant and its owner; idempotent.

    The user's password is (re)set to ``password`` so the printed login always works. With
    ``superuser`` the user is also Django staff/superuser, so the demo can open /admin/ and set
    device budgets. Raises ValueError on an empty username, password or slug.
    """
    if not (username and password and slug):
        raise ValueError("username, password and slug must all be non-empty")
    User = get_user_model()
    user, user_created = User.objects.get_or_create(username=username)
    user.set_password(password)
    if superuser:
        user.is_staff = user.is_superuser = True
    user.save()
    tenant, tenant_created = Tenant.objects.get_or_create(slug=slug, defaults={"name": "Demo team"})
    m = tenant.memberships.filter(user=user).first()
    if m is None:
        tenant.add_member(user, Role.OWNER)
    elif m.role != Role.OWNER:
        m.set_role(Role.OWNER)
    return DemoLogin(username, password, slug, user_created or tenant_created)
