"""DescribeUserScramCredentials (key 50, KIP-554): which SCRAM mechanisms (and iteration
counts) each user has, never the credentials themselves.

Kafka's answers (``ZkAdminManager.describeUserScramCredentials``): no users named means every
user with a credential, sorted; a named user is answered once, RESOURCE_NOT_FOUND when it has
no credential or an empty name, DUPLICATE_RESOURCE when named twice. The store work is
:mod:`strom.security.scram_credentials`.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 50


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    users = None if request.users is None else [u.name for u in request.users]
    results = await ctx.services.scram.describe(users)
    return ctx.respond(
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(
            ctx.make("DescribeUserScramCredentialsResult", user=r.user, error_code=r.error,
                     error_message=r.message,
                     credential_infos=tuple(ctx.make("CredentialInfo", mechanism=m, iterations=i)
                                            for m, i in r.credentials))
            for r in results
        ),
    )  # fmt: skip
