"""Tenants, memberships, roles and API tokens."""
