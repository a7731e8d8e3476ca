"""Keeping an OAUTHBEARER listener's JWKS current (KIP-768's ``RefreshingHttpsJwks``).

The key set at ``sasl.oauthbearer.jwks.endpoint.url`` (``https://``, ``http://`` or
``file://``) is fetched off the event loop (a thread) when the listener starts and every
``sasl.oauthbearer.jwks.endpoint.refresh.ms`` after; a failed fetch keeps the keys it had (one
WARNING) and is retried within :data:`RETRY_S`. Validation reads the
:class:`~strom.security.sasl.oauthbearer.KeySet` without I/O; until a first fetch succeeds
every token is refused (``invalid_token``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from collections.abc import Callable
from typing import Any

from strom.security.sasl.oauthbearer import KeySet

log = logging.getLogger(__name__)
RETRY_S = 10.0
MAX_BYTES = 1 << 20


def fetch(url: str, timeout: float = 10.0) -> dict[str, Any]:
    """The JWKS document at ``url`` (blocking: call it in a thread)."""
    if not url.startswith(("https://", "http://", "file://")):
        raise ValueError(f"{url}: a JWKS URL is https://, http:// or file://")
    with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310 (schemes checked)
        doc = json.loads(answer.read(MAX_BYTES))
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise ValueError(f"{url}: not a JWKS document (no \"keys\" list)")
    return doc


async def refresh(url: str, keys: KeySet) -> bool:
    """Fetch once into ``keys``; whether it worked (a failure is logged)."""
    try:
        doc = await asyncio.to_thread(fetch, url)
        count = keys.update(doc)
    except Exception as exc:  # the network, the document, its keys: keep the old keys
        log.warning("JWKS %s not refreshed (%s keys kept): %s", url, len(keys), exc)
        return False
    log.info("JWKS %s: %d keys", url, count)
    return True


async def keep_fresh(url: str, refresh_ms: int, keys: KeySet, serving: Callable[[], bool],
                     ok: bool = True) -> None:  # fmt: skip
    """Refresh ``keys`` until ``serving()`` turns false (the listener closed); ``ok``: whether
    the last fetch worked (else the next comes within :data:`RETRY_S`)."""
    while True:
        await asyncio.sleep(refresh_ms / 1000 if ok else min(RETRY_S, refresh_ms / 1000))
        if not serving():
            return
        ok = await refresh(url, keys)
