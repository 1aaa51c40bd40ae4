"""Tenants as namespaces of stored ids: no two tenants' ids meet, and no caller writes one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq import tenants
from memq.errors import ValidationError
from memq.events import check_identifier

TENANTS = st.from_regex(tenants.NAME, fullmatch=True)
IDS = st.text(min_size=1, max_size=30).filter(
    lambda s: s.strip() and tenants.SEPARATOR not in s)


@given(tenant=TENANTS, name=IDS)
def test_a_stored_id_splits_back_into_its_tenant_and_name(tenant: str, name: str) -> None:
    assert tenants.split(tenants.inside(tenant, name)) == (tenant, name)
    assert tenants.tenant_of(tenants.inside(tenant, name)) == tenant


@given(first=TENANTS, second=TENANTS, a=IDS, b=IDS)
def test_two_tenants_ids_never_meet(first: str, second: str, a: str, b: str) -> None:
    if first != second:
        assert tenants.inside(first, a) != tenants.inside(second, b)


@given(tenant=TENANTS, name=IDS)
def test_a_stored_id_passes_the_identifier_rules_but_no_caller_can_write_one_unmapped(
        tenant: str, name: str) -> None:
    """The writer accepts a stored id (memq serve writes them, a trusted host may); the
    separator anywhere but once, after a tenant's name, is a control character. (memq
    serve refuses it in any id a key sends: tests/server/test_tenancy.py.)"""
    try:
        check_identifier("id", name)
    except ValidationError:
        return  # a bad name is bad in every tenant
    assert check_identifier("id", tenants.inside(tenant, name)) == tenants.inside(tenant, name)
    with pytest.raises(ValidationError, match="control character"):
        check_identifier("id", f"{tenants.inside(tenant, name)}{tenants.SEPARATOR}")
    with pytest.raises(ValidationError, match="control character"):
        check_identifier("id", f"Not a tenant{tenants.SEPARATOR}{name}")


def test_the_default_tenant_stores_ids_as_they_are() -> None:
    assert tenants.inside(tenants.DEFAULT, "alice") == "alice"
    assert tenants.split("alice") == (tenants.DEFAULT, "alice")
    assert tenants.everyone(tenants.DEFAULT) is None
    assert tenants.everyone_beside("acme\x1falice") == "acme\x1f"
    assert tenants.everyone_beside(None) is None


@pytest.mark.parametrize("bad", ["", "Acme", "-acme", "a" * 41, "ac me", "acme\x1f", "ä"])
def test_a_tenants_name_is_short_and_plain(bad: str) -> None:
    with pytest.raises(ValueError, match="a tenant is 1 to 40"):
        tenants.check_name(bad)


def test_the_pseudo_user_of_a_tenant_is_an_identifier_but_blank_names_are_not() -> None:
    assert check_identifier("user_id", "acme\x1f") == "acme\x1f"
    with pytest.raises(ValidationError, match="must not be empty"):
        check_identifier("user_id", "acme\x1f  ")
    with pytest.raises(ValidationError, match="over the 5 limit"):
        check_identifier("user_id", "acme\x1f123456", max_chars=5)
