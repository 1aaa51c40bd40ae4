"""Tenants: namespaces that keep one customer's users, sessions and memory apart.

A tenant's ids are stored as ``tenant + SEPARATOR + id``. The separator is a control
character (U+001F, the unit separator), which no caller may put in an id
(:func:`memq.events.fields.check_identifier` refuses control characters), so:

- one tenant's ``alice`` and another's are different users by construction, and no id a
  caller writes can name another tenant's data or collide with it;
- the ``default`` tenant's ids are stored as they are: a database made before tenants
  is the default tenant's, unchanged, with nothing to migrate;
- every read that is one user's (or one session's) stays inside its tenant with no
  change: scopes never cross users. What was "global" (a fact or document of no user) is,
  in a tenant, the pseudo-user ``tenant + SEPARATOR`` (:func:`everyone`).

Keys carry their tenant; ``memq serve`` maps what a key's caller names into the tenant
and back (``server/tenancy.py``), and the writer checks a key's events stay inside it
(``store/write/attribution.py``). Local clients and shared tokens span every tenant.
"""

from __future__ import annotations

import re

from memq.errors import ValidationError
from memq.printable import shown

DEFAULT = "default"
"""The tenant of every id without a separator: a deployment's only one until it makes more."""

SEPARATOR = "\x1f"
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}", re.ASCII)
"""A tenant's name: short, lower-case, safe in a URL, a file name and a log line."""

_INTERNAL = re.compile(rf"({NAME.pattern}){SEPARATOR}(.*)", re.ASCII | re.DOTALL)


def check_name(tenant: str, what: str = "tenant") -> str:
    """``tenant`` if it is a tenant's name; ValidationError naming ``what`` and the rule."""
    if not isinstance(tenant, str) or NAME.fullmatch(tenant) is None:
        raise ValidationError(f"{what}: a tenant is 1 to 40 of a-z, 0-9, '_' and '-', "
                              f"starting with a letter or digit; got {shown(tenant):.60}")
    return tenant


def inside(tenant: str, name: str) -> str:
    """The stored form of ``tenant``'s id ``name``."""
    return name if tenant == DEFAULT else f"{tenant}{SEPARATOR}{name}"


def split(stored: str) -> tuple[str, str]:
    """(tenant, id) of a stored id; an id without a tenant's form is the default's."""
    match = _INTERNAL.fullmatch(stored)
    return (DEFAULT, stored) if match is None else (match.group(1), match.group(2))


def name_in(tenant: str, stored: str) -> str | None:
    """The id ``stored`` names in ``tenant`` (``""``: its pseudo-user), or None if it is
    another tenant's."""
    its_tenant, name = split(stored)
    return name if its_tenant == tenant else None


def tenant_of(stored: str | None) -> str:
    return DEFAULT if stored is None else split(stored)[0]


def everyone(tenant: str) -> str | None:
    """Who a tenant's "global" facts and documents belong to: nobody (NULL) in the default
    tenant, the tenant's own pseudo-user in any other."""
    return None if tenant == DEFAULT else f"{tenant}{SEPARATOR}"


def everyone_beside(stored: str | None) -> str | None:
    """:func:`everyone` of the tenant a stored user (or session) id belongs to."""
    return everyone(tenant_of(stored))
