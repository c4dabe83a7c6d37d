"""``manage.py tenant``: create tenants, add/re-role/remove members, list — through the models, with Events,
and refusals that name the input and write nothing."""
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from zico.jobs.models import Event
from zico.tenants.models import Role, Tenant


def run(*args) -> str:
    out = StringIO()
    call_command("tenant", *args, stdout=out)
    return out.getvalue()


def test_it_creates_a_tenant_with_an_owner_and_records_it(personas):
    assert "tenant 'lab' created, owner teammate" in run("create", "lab", "--name", "The Lab", "--owner", "teammate")
    lab = Tenant.objects.get(slug="lab")
    assert lab.name == "The Lab" and lab.role_of(personas.teammate) == Role.OWNER
    created = Event.objects.get(kind="tenant_change", tenant=lab)
    assert created.details == {"created": True, "new": {"slug": "lab", "name": "The Lab"}}


@pytest.mark.parametrize("slug, text", [("acme", "already exists"), ("no spaces", "not a slug"),
                                        ("new", "reserved")])
def test_it_refuses_a_bad_or_taken_slug_and_writes_nothing(personas, slug, text):
    before = Tenant.objects.count()
    with pytest.raises(CommandError, match=text):
        run("create", slug, "--name", "X")
    assert Tenant.objects.count() == before


def test_it_adds_an_existing_user_with_a_role(personas):
    assert "staff added to acme as admin" in run("add-member", "acme", "staff", "--role", "admin")
    assert personas.tenant.role_of(personas.staff) == Role.ADMIN
    assert Event.objects.filter(kind="role_change", details__user="staff", details__new_role="admin").exists()


def test_it_creates_a_missing_user_only_when_asked(personas):
    with pytest.raises(CommandError, match="no user 'newbie'"):
        run("add-member", "acme", "newbie")
    out = run("add-member", "acme", "newbie", "--create-user", "--email", "newbie@example.test")
    assert "changepassword" in out
    newbie = get_user_model().objects.get(username="newbie")
    assert newbie.email == "newbie@example.test" and not newbie.has_usable_password()
    assert personas.tenant.role_of(newbie) == Role.MEMBER


def test_a_bad_email_creates_no_user(personas):
    with pytest.raises(CommandError, match="email"):
        run("add-member", "acme", "newbie", "--create-user", "--email", "not-an-address")
    assert not get_user_model().objects.filter(username="newbie").exists()


def test_it_refuses_adding_a_member_twice(personas):
    with pytest.raises(CommandError, match="already a member"):
        run("add-member", "acme", "teammate")


def test_it_changes_a_role_and_removes_a_member(personas):
    run("set-role", "acme", "teammate", "admin")
    assert personas.tenant.role_of(personas.teammate) == Role.ADMIN
    run("remove-member", "acme", "teammate")
    assert personas.tenant.role_of(personas.teammate) is None


def test_the_last_owner_is_neither_demoted_nor_removed(personas):
    with pytest.raises(CommandError, match="last owner"):
        run("set-role", "acme", "owner", "member")
    with pytest.raises(CommandError, match="last owner"):
        run("remove-member", "acme", "owner")
    assert personas.tenant.role_of(personas.owner) == Role.OWNER


def test_unknown_tenant_or_member_is_named(personas):
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        run("add-member", "nope", "teammate")
    with pytest.raises(CommandError, match="'outsider' is not a member of acme"):
        run("remove-member", "acme", "outsider")


def test_it_lists_tenants_and_members(personas):
    assert run("list").splitlines() == ["acme\tAcme\t4 members", "rival\tRival\t1 members"]
    assert "teammate\tmember" in run("list", "acme").splitlines()
