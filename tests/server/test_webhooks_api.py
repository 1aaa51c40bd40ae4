"""Webhooks through ``memq serve``: the admin token manages them; an agent's token and a
key can neither manage them nor see one in the feed."""
from __future__ import annotations

import pytest

from memq import RemoteMemoryClient
from memq.authority import Role
from memq.errors import PermissionDenied
from tests.producers.serving import Served
from tests.server.conftest import key_for

pytestmark = pytest.mark.redis


def test_admin_token_adds_lists_removes_a_webhook(admin: RemoteMemoryClient) -> None:
    made = admin.add_webhook("https://example.com/hook", types=["fact.*"], user_id="bob")
    admin.flush()
    assert made.secret.startswith("whsec_")
    [hook] = admin.webhooks()
    assert (hook.id, hook.url, hook.types, hook.user_id, hook.secret) == (
        made.id, "https://example.com/hook", ("fact.*",), "bob", None)
    admin.remove_webhook(made.id)
    admin.flush()
    assert admin.webhooks()[0].removed_at is not None


def test_agent_token_and_key_cannot_touch_webhooks(admin: RemoteMemoryClient,
                                                    served: Served) -> None:
    made = admin.add_webhook("https://example.com/hook", types=["*"])
    admin.flush()
    key = key_for(admin, served)
    with RemoteMemoryClient(served.url, token=served.token(Role.AGENT)) as agent:
        for who in (agent, key):
            with pytest.raises(PermissionDenied):
                who.add_webhook("https://evil.example/x", types=["*"])
            with pytest.raises(PermissionDenied):
                who.webhooks()
            with pytest.raises(PermissionDenied):
                who.remove_webhook(made.id)
            for change in who.changes(follow=False):
                assert not change.type.startswith("webhook."), change
                assert made.secret not in str(change.data)
    key.close()
