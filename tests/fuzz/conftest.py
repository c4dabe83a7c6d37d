"""Fixtures for the API fuzz tests: the personas (tenant acme and the outsider's tenant)."""
import pytest

from tests.support.tenants import make_personas


@pytest.fixture
def personas(db):
    return make_personas()
