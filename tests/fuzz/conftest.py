"""Fixtures for the API fuzz tests: the personas (tenant acme and the outsider's tenant)."""
import pytest

from zico.tenants.testing import make_personas


@pytest.fixture
def personas(db):
    return make_personas()
