"""Topic deletion by the controller (Kafka's ``TopicDeletionManager``, simplified).

A request is a child of ``/admin/delete_topics`` (written by any broker,
:func:`strom.controller.topics.request_deletion`). The controller then gives every live broker
an UpdateMetadata announcing the partitions with leader -2 (deleted) and every live replica a
StopReplica(delete); once each live replica answered (or left the cluster,
:func:`replica_answered`), the topic's nodes are removed, fenced by the controller epoch, and
the request node last. A replica on a broker that is down when the topic is deleted is not
waited for: that broker drops the log when it comes back and finds no such topic.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from strom.controller.partitions import ControllerMovedError
from strom.controller.term import Term
from strom.metadata.store import CheckOp, DeleteOp, MultiError, NodeExistsError, NoNodeError
from strom.metadata.zk_model import (
    CONTROLLER_EPOCH_PATH,
    DELETE_TOPICS_PATH,
    TOPIC_CONFIGS_PATH,
    partition_state_path,
    partitions_path,
    topic_path,
)

log = logging.getLogger(__name__)


async def on_delete_requests(term: Term) -> None:
    """The requests under ``/admin/delete_topics`` (watched): start each new one."""
    ctx, store = term.ctx, term.store
    watch = term.watch(lambda: on_delete_requests(term))
    try:
        names = await store.children(DELETE_TOPICS_PATH, watch=watch)
    except NoNodeError:
        with contextlib.suppress(NodeExistsError):
            await store.create(DELETE_TOPICS_PATH, make_parents=True)
        names = await store.children(DELETE_TOPICS_PATH, watch=watch)
    for name in names:
        if name not in ctx.topics:
            with contextlib.suppress(NoNodeError):
                await store.delete(f"{DELETE_TOPICS_PATH}/{name}")
            continue
        if name not in ctx.deleting:
            _start(term, name)


def _start(term: Term, name: str) -> None:
    ctx = term.ctx
    ctx.deleting.add(name)
    tps = ctx.partitions([name])
    waits = {b for tp in tps for b in ctx.replicas(tp) if ctx.live(b)}
    ctx.deletion_waits[name] = set(waits)
    log.info("controller: deleting topic %s (replicas on brokers %s)", name, sorted(waits))
    batch = term.batch()
    batch.deleted = set(tps)
    batch.add_update_metadata(ctx.live_ids(), tps)
    for tp in tps:
        batch.add_stop_replica(ctx.replicas(tp), tp, delete=True)

    def answered(broker: int, response: Any) -> None:
        if not term.current:
            return
        if getattr(response, "error_code", 0):
            log.warning("StopReplica of topic %s on broker %d: error %s", name, broker,
                        response.error_code)  # fmt: skip
        replica_answered(term, name, broker)

    batch.stop_callback = answered
    term.send(batch)
    if not waits:
        term.submit(lambda: _finish(term, name))


def replica_answered(term: Term, name: str, broker: int) -> None:
    """A replica of a topic being deleted is gone (it answered, or its broker left)."""
    ctx = term.ctx
    if not term.current or name not in ctx.deletion_waits:
        return
    waits = ctx.deletion_waits[name]
    waits.discard(broker)
    if not waits:
        del ctx.deletion_waits[name]
        term.submit(lambda: _finish(term, name))


async def _finish(term: Term, name: str) -> None:
    ctx, store = term.ctx, term.store
    doc = ctx.topics.get(name)
    if doc is not None:
        ops: list[Any] = [CheckOp(CONTROLLER_EPOCH_PATH, ctx.epoch_version)]
        for p in sorted(doc.assignment):
            state = partition_state_path(name, p)
            ops += [DeleteOp(state), DeleteOp(state.rsplit("/", 1)[0])]
        ops += [DeleteOp(partitions_path(name)), DeleteOp(topic_path(name))]
        try:
            await store.multi(ops)
        except MultiError as exc:
            if exc.index == 0:
                raise ControllerMovedError(str(exc)) from None
            # a partition without state (never online): remove what is there
            with contextlib.suppress(NoNodeError):
                await store.delete(topic_path(name), recursive=True)
    with contextlib.suppress(NoNodeError):
        await store.delete(f"{TOPIC_CONFIGS_PATH}/{name}")
    with contextlib.suppress(NoNodeError):
        await store.delete(f"{DELETE_TOPICS_PATH}/{name}")
    ctx.topics.pop(name, None)
    for tp in [tp for tp in ctx.states if tp[0] == name]:
        del ctx.states[tp]
    ctx.deleting.discard(name)
    log.info("controller: topic %s deleted", name)
