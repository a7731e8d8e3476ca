"""DescribeUserScramCredentials (key 50, KIP-554): which SCRAM mechanisms (and iteration
counts) each user has, never the credentials themselves.

Kafka's answers (``ZkAdminManager.describeUserScramCredentials``): no users named means every
user with a credential, sorted; a named user is answered once, RESOURCE_NOT_FOUND when it has
no credential or an empty name, DUPLICATE_RESOURCE when named twice; without DESCRIBE on the
cluster (an authorizer's ACLs) CLUSTER_AUTHORIZATION_FAILED, top-level and per named user. The store work is
:mod:`strom.security.scram_credentials`.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 50


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    users = None if request.users is None else [u.name for u in request.users]
    if not authz.authorize_cluster(ctx, authz.DESCRIBE):  # Kafka: DESCRIBE on the cluster
        denied = ErrorCode.cluster_authorization_failed
        return ctx.respond(throttle_time=0, error_code=denied,
                           error_message="not authorized to DESCRIBE the cluster",
                           results=tuple(ctx.make("DescribeUserScramCredentialsResult", user=u,
                                                  error_code=denied, error_message=None,
                                                  credential_infos=())
                                         for u in dict.fromkeys(users or ())))  # fmt: skip
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
