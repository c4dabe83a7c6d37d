"""API tokens: only a hash is stored, the secret authenticates until revoked, bad input never does."""
from django.db import connection

from zico.tenants.models import ApiToken


def test_only_a_hash_of_the_secret_is_stored(personas):
    token, raw = ApiToken.issue(personas.owner, "laptop")
    secret = raw.split("_", 2)[2]
    with connection.cursor() as cur:
        cur.execute("SELECT * FROM tenants_apitoken WHERE id = %s", [token.pk])
        row = cur.fetchone()
    assert not any(secret in str(v) for v in row)
    assert raw.startswith(f"zico_{token.prefix}_")


def test_the_token_authenticates_until_it_is_revoked(personas):
    token, raw = ApiToken.issue(personas.owner, "ci")
    found = ApiToken.authenticate(raw)
    assert found.pk == token.pk and found.user == personas.owner
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None
    token.revoke()
    assert ApiToken.authenticate(raw) is None


def test_wrong_or_malformed_tokens_do_not_authenticate(personas):
    token, raw = ApiToken.issue(personas.owner, "ci")
    prefix = token.prefix
    for bad in ["", "zico", f"zico_{prefix}_", f"zico_{prefix}_{'x' * 43}", raw + "x", raw.replace("zico", "ozic"),
                f"zico_{prefix[:-1]}_{raw.split('_', 2)[2]}"]:
        assert ApiToken.authenticate(bad) is None, bad
