"""``manage.py tenant``: create tenants and manage their members without Django's admin.

    manage.py tenant create SLUG --name NAME [--owner USER]
    manage.py tenant add-member SLUG USER [--role member] [--create-user [--email ADDR]]
    manage.py tenant set-role SLUG USER ROLE
    manage.py tenant remove-member SLUG USER
    manage.py tenant list [SLUG]

Every change goes through the models (zico.tenants.models, zico.tenants.services), so it is validated and
leaves the same Events as the team page and the API (actor: none, "the system did it"). A refused change
exits with status 1 and a message naming the input (CommandError); nothing is written.
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from zico.tenants.models import Role, RoleError, Tenant
from zico.tenants.services import TenantError, add_member_by_username, create_tenant


class Command(BaseCommand):
    help = "Create tenants, add, re-role and remove members, list tenants and members."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        p = sub.add_parser("create", help="create a tenant")
        p.add_argument("slug")
        p.add_argument("--name", required=True, help="display name")
        p.add_argument("--owner", help="username of an existing user to make its first owner")
        p = sub.add_parser("add-member", help="add a user to a tenant")
        p.add_argument("slug")
        p.add_argument("username")
        p.add_argument("--role", default=Role.MEMBER, choices=Role.values)
        p.add_argument("--create-user", action="store_true",
                       help="create the user if missing (no password: set one with manage.py changepassword)")
        p.add_argument("--email", default="", help="the new user's e-mail address (with --create-user)")
        p = sub.add_parser("set-role", help="change a member's role")
        p.add_argument("slug")
        p.add_argument("username")
        p.add_argument("role", choices=Role.values)
        p = sub.add_parser("remove-member", help="remove a member (never the last owner)")
        p.add_argument("slug")
        p.add_argument("username")
        p = sub.add_parser("list", help="list tenants, or one tenant's members")
        p.add_argument("slug", nargs="?")

    def handle(self, *args, **opts):
        try:
            getattr(self, "_" + opts["action"].replace("-", "_"))(opts)
        except (TenantError, RoleError) as exc:
            raise CommandError(str(exc)) from exc

    # -- actions ---------------------------------------------------------------------------------
    def _create(self, opts):
        owner = None
        if opts["owner"]:
            owner = get_user_model().objects.filter(username=opts["owner"], is_active=True).first()
            if owner is None:
                raise CommandError(f"--owner: no active user {opts['owner']!r}")
        tenant = create_tenant(opts["slug"], opts["name"], owner=owner)
        self.stdout.write(f"tenant {tenant.slug!r} created" + (f", owner {owner.get_username()}" if owner else ""))

    def _add_member(self, opts):
        tenant = _tenant(opts["slug"])
        existed = get_user_model().objects.filter(username=opts["username"]).exists()
        m = add_member_by_username(tenant, opts["username"], opts["role"], create_user=opts["create_user"],
                                   email=opts["email"])
        note = "" if existed else " (user created without a password: set one with manage.py changepassword)"
        self.stdout.write(f"{m.user.get_username()} added to {tenant.slug} as {m.role}{note}")

    def _set_role(self, opts):
        tenant = _tenant(opts["slug"])
        m = _membership(tenant, opts["username"])
        m.set_role(opts["role"])
        self.stdout.write(f"{opts['username']} is now {m.role} in {tenant.slug}")

    def _remove_member(self, opts):
        tenant = _tenant(opts["slug"])
        _membership(tenant, opts["username"]).remove()
        self.stdout.write(f"{opts['username']} removed from {tenant.slug}")

    def _list(self, opts):
        if opts["slug"]:
            tenant = _tenant(opts["slug"])
            for m in tenant.memberships.select_related("user").order_by("user__username"):
                self.stdout.write(f"{m.user.get_username()}\t{m.role}")
            return
        for t in Tenant.objects.order_by("slug"):
            self.stdout.write(f"{t.slug}\t{t.name}\t{t.memberships.count()} members")


def _tenant(slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise CommandError(f"slug: no tenant {slug!r}")
    return tenant


def _membership(tenant: Tenant, username: str):
    m = tenant.memberships.select_related("user").filter(user__username=username).first()
    if m is None:
        raise CommandError(f"username: {username!r} is not a member of {tenant.slug}")
    return m
