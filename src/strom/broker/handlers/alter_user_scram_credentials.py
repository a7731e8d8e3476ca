"""AlterUserScramCredentials (key 51, KIP-554): create, replace or delete users' SCRAM
credentials.

An upsertion carries the client's salt and salted password (PBKDF2 of the password: the
password never reaches the broker); the broker keeps Kafka's StoredKey / ServerKey made from
it. Kafka's errors per user: UNACCEPTABLE_CREDENTIAL (an empty name, iterations outside
4096..16384), UNSUPPORTED_SASL_MECHANISM (a mechanism type other than 1 and 2),
DUPLICATE_RESOURCE (a user and mechanism twice in one request), RESOURCE_NOT_FOUND (deleting a
credential the user does not have); CLUSTER_AUTHORIZATION_FAILED for every user without ALTER
on the cluster (an authorizer's ACLs). See :mod:`strom.security.scram_credentials`.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode
from strom.security.scram_credentials import Deletion, Upsertion

API_KEY = 51


@dispatch.handler(API_KEY, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> Any:
    upsertions = [Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt),
                            bytes(u.salted_password)) for u in request.upsertions]  # fmt: skip
    deletions = [Deletion(d.name, int(d.mechanism)) for d in request.deletions]
    if not authz.authorize_cluster(ctx, authz.ALTER):  # Kafka: ALTER on the cluster
        names = dict.fromkeys([*(u.user for u in upsertions), *(d.user for d in deletions)])
        return ctx.respond(throttle_time=0, results=tuple(
            ctx.make("AlterUserScramCredentialsResult", user=name,
                     error_code=ErrorCode.cluster_authorization_failed,
                     error_message="not authorized to ALTER the cluster")
            for name in names))  # fmt: skip
    results = await ctx.services.scram.alter(upsertions, deletions)
    return ctx.respond(
        throttle_time=0,
        results=tuple(ctx.make("AlterUserScramCredentialsResult", user=r.user,
                               error_code=r.error, error_message=r.message)
                      for r in results),
    )  # fmt: skip
