"""Webhooks from the client: the person registers, lists and removes them (admin only);
``memq webhooks run`` delivers (``store/dispatch/webhooks.py``).

A webhook is an event (``webhook.added``, ``webhook.removed``), so it survives a rebuild,
a backup and a restore. Its secret is made here and shown once, in the answer.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from memq import tenants, webhooks
from memq.errors import NotFound, ValidationError
from memq.events import EventType, check_identifier
from memq.events.rules import type_patterns
from memq.printable import shown
from memq.producers.keys import KeysOps
from memq.producers.ops import Op, Read
from memq.store.read.webhooks import Webhook
from memq.store.read.webhooks import webhooks as stored


@dataclass(frozen=True)
class NewWebhook:
    id: str
    secret: str
    """Signs every delivery (``memq.webhooks.verify``): shown this once."""


class WebhooksOps(KeysOps):
    def _add_webhook_op(self, url: str, types: Sequence[str], user_id: str | None,
                        tenant: str | None) -> Op[NewWebhook]:
        problem = webhooks.url_problem(url)
        if problem is not None:
            raise ValidationError(f"url {problem}, got {shown(url):.80}")
        listed = list(types) if isinstance(types, (list, tuple)) else None
        if listed is None or type_patterns(listed) is not None:
            raise ValidationError("types must list 1 to 50 event types or patterns such as "
                                  f"'fact.*', got {shown(types):.80}")
        hook_id, secret = secrets.token_hex(8), webhooks.new_secret()
        payload = {"webhook_id": hook_id, "url": url, "types": listed, "secret": secret}
        if user_id is not None:
            payload["user_id"] = check_identifier("user_id", user_id)
        if tenant is not None:
            payload["tenant"] = tenants.check_name(tenant)
        yield from self._send_op(EventType.WEBHOOK_ADDED, payload)
        return NewWebhook(hook_id, secret)

    def _webhooks_op(self) -> Op[list[Webhook]]:
        yield from self._person_op("listing webhooks")
        found: list[Webhook] = yield Read(stored)
        return found

    def _remove_webhook_op(self, webhook_id: str) -> Op[str]:
        yield from self._person_op("removing a webhook")
        found: list[Webhook] = yield Read(stored)
        if not any(h.id == webhook_id and h.removed_at is None for h in found):
            raise NotFound(f"no webhook {shown(webhook_id):.40}")
        yield from self._send_op(EventType.WEBHOOK_REMOVED, {"webhook_id": webhook_id})
        return webhook_id
