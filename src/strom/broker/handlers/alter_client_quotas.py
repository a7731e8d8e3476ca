"""AlterClientQuotas (key 49): set or remove quota keys of user / client-id entities.

Each entry is checked and written on its own (one entry's refusal leaves the others'
changes), with Kafka's errors, all INVALID_REQUEST: an empty entity, an unknown entity type,
an empty name, an IP entity (strom keeps no IP quotas), an unknown key, a value not above 0,
a fractional value of a LONG key (``producer_byte_rate``, ``consumer_byte_rate``), a key twice
in one entry, an entity twice in one request (KRaft's ``ClientQuotaControlManager``). The
change is written to the entity's node in the metadata store at its version, keeping the
node's other keys (a user's SCRAM credentials), then applied here; every other broker applies
it when its watch fires (:mod:`strom.security.quota_store`). ``validate_only`` checks and
writes nothing.

Authorization: ALTER_CONFIGS on the CLUSTER, else every entry is CLUSTER_AUTHORIZATION_FAILED and
nothing changes.
"""

from __future__ import annotations

import logging
from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.metadata.store import StoreError
from strom.protocol.errors import ErrorCode, KafkaError
from strom.security.quotas import Entity, QuotaError, entity_from_components

API_KEY = 49
log = logging.getLogger(__name__)


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    results = []
    seen: set[Entity] = set()
    allowed = authz.authorize_cluster(ctx, authz.ALTER_CONFIGS)
    for entry in request.entries:
        components = [(e.entity_type, e.entity_name) for e in entry.entity]
        code, message = ErrorCode.none, None
        try:
            if not allowed:
                raise KafkaError(ErrorCode.cluster_authorization_failed,
                                 "not authorized to alter client quotas")  # fmt: skip
            entity = entity_from_components(components)
            if entity in seen:
                raise QuotaError(f"Ignoring duplicate entity {entity.describe()}")
            seen.add(entity)
            ops = [(op.key, float(op.value), bool(op.remove)) for op in entry.ops]
            await ctx.services.quotas.alter(entity, ops, bool(request.validate_only))
        except QuotaError as exc:
            code, message = ErrorCode[exc.code], str(exc)
        except KafkaError as exc:
            code, message = exc.error_code, str(exc)
        except StoreError as exc:
            log.warning("client quota alteration not written: %s", exc)
            code, message = ErrorCode.unknown_server_error, f"not written: {exc}"
        results.append(ctx.make(
            "EntryData", error_code=code, error_message=message,
            entity=tuple(ctx.make("EntityData", entity_type=e.entity_type,
                                  entity_name=e.entity_name) for e in entry.entity),
        ))  # fmt: skip
    return ctx.respond(throttle_time=0, entries=tuple(results))
