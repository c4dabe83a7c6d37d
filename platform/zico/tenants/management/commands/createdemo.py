"""``manage.py createdemo``: create the demo tenant and owner user, then print the login."""
from django.core.management.base import BaseCommand

from zico.tenants.services import DEMO_PASSWORD, DEMO_SLUG, DEMO_USERNAME, create_demo_tenant


class Command(BaseCommand):
    help = "Create (idempotently) the demo tenant and its owner user, and print the login."

    def add_arguments(self, parser):
        parser.add_argument("--username", default=DEMO_USERNAME)
        parser.add_argument("--password", default=DEMO_PASSWORD)
        parser.add_argument("--tenant", default=DEMO_SLUG, help="tenant slug")
        parser.add_argument("--no-superuser", action="store_true", help="do not make the user staff/superuser")

    def handle(self, *args, **opts):
        login = create_demo_tenant(username=opts["username"], password=opts["password"], slug=opts["tenant"],
                                   superuser=not opts["no_superuser"])
        what = "created" if login.created else "already present (password reset)"
        self.stdout.write(f"demo tenant {login.tenant_slug!r} {what}")
        self.stdout.write(f"login: {login.username} / {login.password}")
