"""FindCoordinator (key 10): the broker leading the key's internal-topic partition.

A group's coordinator is the leader of its ``__consumer_offsets`` partition, a transactional
id's the leader of its ``__transaction_state`` partition, as the metadata cache says (on a
single node: this broker, always); no leader known is COORDINATOR_NOT_AVAILABLE. The internal
topic is created by the first FindCoordinator that needs it (:mod:`strom.broker.internal_topics`;
COORDINATOR_NOT_AVAILABLE until it exists). When this broker is the leader but its coordinator
has not loaded the partition yet: COORDINATOR_LOAD_IN_PROGRESS while loading, else
COORDINATOR_NOT_AVAILABLE (the LeaderAndIsr making it the leader is on its way).

v0–3 ask for one key; v4+ for a batch (``coordinator_keys``). Key type 0 is a group (classic
or share), key type 1 a transactional id (the transaction coordinator), key type 2 (v6) a
share-partition ``group:topicId:partition`` (the share coordinator: the leader of its
``__share_group_state`` partition, which this creates on first use). v5 only adds
TRANSACTION_ABORTABLE to the errors. An empty key is INVALID_REQUEST as in Kafka.

Authorization: DESCRIBE on the GROUP (else GROUP_AUTHORIZATION_FAILED) or the TRANSACTIONAL_ID
(else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); a share-partition key CLUSTER_ACTION (else
CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch
from strom.broker.context import RequestContext
from strom.broker.group.coordinator import GroupCoordinator
from strom.broker.internal_topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC
from strom.broker.share.coordinator import partition_for_key
from strom.broker.txn.coordinator import TransactionCoordinator
from strom.protocol.errors import ErrorCode
from strom.replication.metadata_cache import BrokerInfo

API_KEY = 10
GROUP_KEY_TYPE = 0
TXN_KEY_TYPE = 1
SHARE_KEY_TYPE = 2


Lookup = tuple[ErrorCode, str | None, "BrokerInfo | None"]


def _leader(ctx: RequestContext, topic: str, partition: int) -> Lookup:
    """The coordinator is the leader of the key's partition of the internal topic (the metadata
    cache's); None when it is this broker."""
    cache = ctx.replicas.cache
    state = cache.partition(topic, partition)
    if state is None or state.leader < 0:
        return ErrorCode.coordinator_not_available, f"{topic}-{partition} has no leader", None
    if state.leader == ctx.node.node_id:
        return ErrorCode.none, None, None
    found = cache.broker_on(state.leader, ctx.client.listener)
    if found is None:
        return (ErrorCode.coordinator_not_available,
                f"broker {state.leader} is not alive on listener {ctx.client.listener}", None)
    return ErrorCode.none, None, found


async def _share_lookup(ctx: RequestContext, key: str) -> Lookup:
    if key.count(":") < 2:
        return ErrorCode.invalid_request, f"share coordinator key {key!r} is not group:topicId:partition", None
    info = await ctx.services.internal_topics.ensure(SHARE_STATE_TOPIC)
    if info is None:
        return ErrorCode.coordinator_not_available, f"{SHARE_STATE_TOPIC} is being created", None
    partition = partition_for_key(key, info.partition_count)
    found = _leader(ctx, SHARE_STATE_TOPIC, partition)
    if found[0] != ErrorCode.none or found[2] is not None:
        return found
    coordinator = ctx.shares.state.coordinator
    if coordinator is None or coordinator.not_here_partition(partition):
        return ErrorCode.coordinator_not_available, f"{SHARE_STATE_TOPIC}-{partition} not loaded yet", None
    return ErrorCode.none, None, None


async def _lookup(ctx: RequestContext, key: str, key_type: int) -> Lookup:
    denied = _denied(ctx, key, key_type)
    if denied is not None:
        return denied, f"not authorized to find the coordinator of {key}", None
    if key_type == SHARE_KEY_TYPE and ctx.api_version >= 6 and key:
        return await _share_lookup(ctx, key)
    if key_type not in (GROUP_KEY_TYPE, TXN_KEY_TYPE):
        return ErrorCode.invalid_request, f"unknown key type {key_type}", None
    group = key_type == GROUP_KEY_TYPE
    if not key:
        return ErrorCode.invalid_request, f"empty {'group' if group else 'transactional'} id", None
    coordinator: GroupCoordinator | TransactionCoordinator | None
    if group:
        topic, coordinator = OFFSETS_TOPIC, ctx.groups.coordinator
    else:
        topic, coordinator = TXN_TOPIC, ctx.transactions.coordinator
    if coordinator is None:
        return ErrorCode.coordinator_not_available, f"{topic} coordinator not started", None
    if await ctx.services.internal_topics.ensure(topic) is None:
        return ErrorCode.coordinator_not_available, f"{topic} is being created", None
    partition = coordinator.partition_for(key)
    found = _leader(ctx, topic, partition)
    if found[0] != ErrorCode.none or found[2] is not None:
        return found
    code = coordinator.not_here(key)
    if code == ErrorCode.not_coordinator:
        return ErrorCode.coordinator_not_available, f"{topic}-{partition} not loaded yet", None
    if code is not None:
        return code, None, None
    return ErrorCode.none, None, None


def _denied(ctx: RequestContext, key: str, key_type: int) -> ErrorCode | None:
    """Kafka's checks: DESCRIBE on the group or the transactional id; a share-partition key
    (brokers' own lookups) CLUSTER_ACTION."""
    if ctx.services.authorizer is None:
        return None
    if key_type == GROUP_KEY_TYPE and not authz.authorize(ctx, authz.DESCRIBE, authz.GROUP, key):
        return ErrorCode.group_authorization_failed
    if key_type == TXN_KEY_TYPE and not authz.authorize(ctx, authz.DESCRIBE, authz.TRANSACTIONAL_ID,
                                                        key):  # fmt: skip
        return ErrorCode.transactional_id_authorization_failed
    if key_type == SHARE_KEY_TYPE and not authz.authorize_cluster(ctx, authz.CLUSTER_ACTION):
        return ErrorCode.cluster_authorization_failed
    return None


@dispatch.handler(API_KEY, 0, 6)
async def handle(ctx: RequestContext, request: Any) -> Any:
    key_type = int(getattr(request, "key_type", 0))
    host, port = ctx.node.advertised_on(ctx.client.listener)
    node = ctx.node.node_id

    def answer(code: ErrorCode, message: str | None, other: BrokerInfo | None) -> dict[str, Any]:
        ok = code == ErrorCode.none
        if ok and other is not None:
            return {"error_code": code, "error_message": None, "node_id": other.node_id,
                    "host": other.host, "port": other.port}  # fmt: skip
        return {
            "error_code": code,
            "error_message": message if not ok else None,
            "node_id": node if ok else -1,
            "host": host if ok else "",
            "port": port if ok else -1,
        }

    if ctx.api_version >= 4:
        coordinators = tuple(
            [ctx.make("Coordinator", key=key, **answer(*await _lookup(ctx, key, key_type)))
             for key in request.coordinator_keys]
        )
        return ctx.respond(throttle_time=0, coordinators=coordinators)
    return ctx.respond(throttle_time=0, **answer(*await _lookup(ctx, request.key, key_type)))
