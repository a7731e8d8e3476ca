"""DeleteTopics (key 20): delete topics by name (v1+) or by topic id (v6).

Unknown names get UNKNOWN_TOPIC_OR_PARTITION, unknown ids UNKNOWN_TOPIC_ID; internal topics
(``__consumer_offsets``, ``__transaction_state``) are refused with INVALID_REQUEST, and every
topic with TOPIC_DELETION_DISABLED when ``delete.topic.enable`` is false. The logs go first,
then the registry entry: a crash in between leaves an empty topic, never old data under a
recreated name. File work (closing, renaming, and in the background ``rmtree``) runs off the
event loop (:mod:`strom.broker.topic_lifecycle`). In cluster mode the deletion is requested
from the controller (``/admin/delete_topics``) and answered once done or at ``timeout_ms``
(REQUEST_TIMED_OUT; it goes on), see :mod:`strom.controller.admin`.

Quota: each topic deleted takes its partitions from the client's ``controller_mutation_rate``
(KIP-599), after the checks above and before it is deleted; from v5 strictly (once exhausted,
THROTTLING_QUOTA_EXCEEDED and the topic stays), before v5 the answer is only throttled.

Authorization: DELETE on each topic, else TOPIC_AUTHORIZATION_FAILED (whether it exists or not; a
topic named by id keeps its name unsaid).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from strom.broker import authz, dispatch, throttling
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode, KafkaError, error_code_of
from strom.security.quotas import MutationQuota

API_KEY = 20
ZERO_UUID = uuid.UUID(int=0)
log = logging.getLogger(__name__)


async def _delete(
    ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None, timeout: float,
    quota: MutationQuota,
) -> tuple[str | None, uuid.UUID]:
    topics = ctx.topics
    if ctx.services.authorizer is not None:
        by_id = topic_id is not None and topic_id != ZERO_UUID
        known = topics.by_id(topic_id) if topic_id is not None and by_id else None
        resolved = known.name if known is not None else (None if by_id else name)
        if resolved is not None and not authz.authorize(ctx, authz.DELETE, authz.TOPIC, resolved):
            raise KafkaError(ErrorCode.topic_authorization_failed,
                             f"not authorized to delete topic {name or topic_id}")  # fmt: skip
    if topics.cluster:  # cluster mode: the controller deletes it (strom.controller.admin)
        if not ctx.config.get_bool("delete.topic.enable"):
            raise KafkaError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
        by_id = topic_id is not None and topic_id != ZERO_UUID
        known = topics.by_id(topic_id) if topic_id is not None and by_id else \
            topics.get(name) if name else None  # fmt: skip
        if known is not None and not known.is_internal:  # else the controller refuses it
            quota.record(known.partition_count)
        return await topics.delete_in_cluster(name, topic_id, timeout)
    if topic_id is not None and topic_id != ZERO_UUID:
        info = topics.by_id(topic_id)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_id, f"Topic id {topic_id} does not exist.")
    else:
        info = topics.get(name) if name else None
        if info is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist."
            )
    if not ctx.config.get_bool("delete.topic.enable"):
        raise KafkaError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
    if info.is_internal:
        raise KafkaError(
            ErrorCode.invalid_request,
            f"Topic {info.name} is an internal topic and cannot be deleted.",
        )
    quota.record(info.partition_count)
    await topics.delete(info)
    log.info("deleted topic %s (%s)", info.name, info.topic_id)
    return info.name, info.topic_id


def _timeout_s(request: Any) -> float:
    timeout = request.timeout
    if hasattr(timeout, "total_seconds"):
        return float(timeout.total_seconds())
    return int(timeout) / 1000.0


@dispatch.handler(API_KEY, 1, 6)
async def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(n, None) for n in request.topic_names]
    results = []
    quota = throttling.mutation_quota(ctx)
    for name, topic_id in wanted:
        try:
            found_name, found_id = await _delete(ctx, name, topic_id, _timeout_s(request), quota)
            code, message = ErrorCode.none, None
        except Exception as exc:
            code, message = error_code_of(exc), str(exc)
            if code == ErrorCode.unknown_server_error:
                log.exception("deleting topic %s failed", name or topic_id)
            found_name, found_id = name, topic_id or ZERO_UUID
        results.append(
            ctx.make(
                "DeletableTopicResult",
                name=found_name,
                topic_id=found_id,
                error_code=code,
                error_message=message,
            )
        )
    return ctx.respond(throttle_time=quota.throttle_ms(), responses=tuple(results))
