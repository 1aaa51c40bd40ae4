"""What a refusal of a key's event tells that key."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memq import tenants
from memq.store.write import attribution

names = st.text(alphabet=st.characters(exclude_categories=("Cc", "Cs")), min_size=1,
                max_size=20)


@given(tenant=st.from_regex(tenants.NAME, fullmatch=True), name=names)
def test_a_session_is_named_as_its_key_names_it_never_in_its_stored_form(
        tenant: str, name: str) -> None:
    """The stored form joins tenant and id with a control character: a reason quoting it
    showed the key memq's internals and an escape it never sent."""
    said = attribution._session(tenants.inside(tenant, name))
    assert said == f"session {name!r}"[:68]
    assert tenants.SEPARATOR not in said
