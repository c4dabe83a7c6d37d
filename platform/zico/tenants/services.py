"""Small tenant operations other lanes call: create the demo tenant and its owner.

``create_demo_tenant()`` is what ``manage.py createdemo`` (and so the set-up script) runs.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import transaction

from .models import Role, Tenant

DEMO_SLUG = "demo"
DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo-password-zico"


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
