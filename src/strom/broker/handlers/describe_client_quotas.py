"""DescribeClientQuotas (key 48): the quota entities a filter matches, with their values.

Answered from this broker's cache of every entity's quotas (kept by
:class:`~strom.security.quota_store.QuotaStore` from the metadata store's watches), with
Kafka's filter rules (:meth:`~strom.security.quotas.ClientQuotas.describe`): components of
type ``user`` / ``client-id`` matched exactly, as the default, or any name; ``strict`` leaves
out entities with components the filter does not name. A refused filter answers with the
top-level error (INVALID_REQUEST, or UNSUPPORTED_VERSION for an entity type Kafka does not
know) and no entries, as Kafka does.

Authorization: DESCRIBE_CONFIGS on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode
from strom.security.quotas import QuotaError

API_KEY = 48


@dispatch.handler(API_KEY, 0, 1)
def handle(ctx: RequestContext, request: Any) -> Any:
    if not authz.authorize_cluster(ctx, authz.DESCRIBE_CONFIGS):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.cluster_authorization_failed,
                           error_message="not authorized to describe client quotas",
                           entries=None)  # fmt: skip
    components = [(c.entity_type, int(c.match_type), c.match) for c in request.components]
    try:
        found = ctx.services.quotas.quotas.describe(components, bool(request.strict))
    except QuotaError as exc:
        return ctx.respond(throttle_time=0, error_code=ErrorCode[exc.code], error_message=str(exc),
                           entries=None)  # fmt: skip
    entries = tuple(
        ctx.make("EntryData",
                 entity=tuple(ctx.make("EntityData", entity_type=kind, entity_name=name)
                              for kind, name in entity.components()),
                 values=tuple(ctx.make("ValueData", key=key, value=value)
                              for key, value in sorted(values.items())))
        for entity, values in found
    )  # fmt: skip
    return ctx.respond(throttle_time=0, error_code=ErrorCode.none, error_message=None,
                       entries=entries)  # fmt: skip
