"""Test personas for every lane's access tests: owner, teammate, viewer, admin, outsider, staff.

``make_personas()`` builds two tenants: ``acme`` (owner, admin, teammate = member, viewer) and
``rival`` (outsider as its owner), plus a staff user who belongs to no tenant. Tests should
assert that the outsider gets 404 for acme's objects and never sees their data.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model

from zico.tenants.models import Role, Tenant

PASSWORD = "persona-password-1"


@dataclass
class Personas:
    tenant: Tenant        # acme
    other_tenant: Tenant  # rival
    owner: object
    admin: object
    teammate: object      # role member in acme
    viewer: object
    outsider: object      # owner of rival, not in acme
    staff: object         # is_staff, in no tenant


def make_personas(*, acme_quota_bytes: int | None = None) -> Personas:
    """Create the personas (all with password ``PASSWORD``) and return them."""
    User = get_user_model()

    def user(name: str, **extra):
        return User.objects.create_user(name, f"{name}@example.test", PASSWORD, **extra)

    acme = Tenant.objects.create(name="Acme", slug="acme", max_total_budget_bytes=acme_quota_bytes)
    rival = Tenant.objects.create(name="Rival", slug="rival")
    p = Personas(acme, rival, user("owner"), user("admin"), user("teammate"), user("viewer"), user("outsider"),
                 user("staff", is_staff=True))
    acme.add_member(p.owner, Role.OWNER)
    acme.add_member(p.admin, Role.ADMIN)
    acme.add_member(p.teammate, Role.MEMBER)
    acme.add_member(p.viewer, Role.VIEWER)
    rival.add_member(p.outsider, Role.OWNER)
    return p
