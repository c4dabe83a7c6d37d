"""manage.py createdemo: creates the demo tenant and owner, idempotently, and the printed login works."""
import io

from django.core.management import call_command
from django.test import Client

from zico.tenants.models import Tenant


def test_createdemo_creates_a_working_login_and_can_run_twice(db):
    out = io.StringIO()
    call_command("createdemo", stdout=out)
    call_command("createdemo", stdout=out)
    text = out.getvalue()
    assert "login: demo / demo-password-zico" in text and "already present" in text
    tenant = Tenant.objects.get(slug="demo")
    assert tenant.memberships.get().role == "owner"
    assert Client().login(username="demo", password="demo-password-zico")
