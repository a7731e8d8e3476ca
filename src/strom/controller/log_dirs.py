"""Replicas in offline log directories (Kafka's ``LogDirEventNotification`` handling).

A broker whose log directory goes offline (:mod:`strom.storage.log_dir_failures`) stops its
replicas there and writes ``/log_dir_event_notification/log_dir_event_<n>`` naming itself
(:mod:`strom.broker.log_dir_failure_handler`). The controller watches that path: for each
notification it sends the broker LeaderAndIsr for every partition it hosts, and deletes the
notification. A broker answers KAFKA_STORAGE_ERROR for a partition whose log directory is
offline: every LeaderAndIsr answer is read for that (:func:`leader_and_isr_answered`, also
after a controller failover, as Kafka learns ``replicasOnOfflineDirs``). Such a replica is
then offline (:meth:`~strom.controller.context.ControllerContext.replica_online`): a
partition it led gets a leader elected from the rest of its ISR, it leaves every ISR (the
last member stays, leader -1, as for a lost broker), and UpdateMetadata lists it among the
partition's offline replicas. The broker's replicas are online again once it registers anew
(a restart, which recovers the directory).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from strom.controller.context import TP
from strom.controller.term import Term
from strom.metadata.store import NodeExistsError, NoNodeError
from strom.metadata.zk_model import LOG_DIR_EVENT_PATH, log_dir_event_from_json
from strom.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


async def watch_events(term: Term) -> None:
    """Make sure the notification path exists, watch it and handle what is there (failover)."""
    with contextlib.suppress(NodeExistsError):
        if await term.store.exists(LOG_DIR_EVENT_PATH) is None:
            await term.store.create(LOG_DIR_EVENT_PATH, make_parents=True)
    await on_events(term)


async def on_events(term: Term) -> None:
    """The notifications' children changed: read and delete each, then ask each broker named
    (if live) for the state of every partition it hosts."""
    store, ctx = term.store, term.ctx
    try:
        names = await store.children(LOG_DIR_EVENT_PATH, watch=term.watch(lambda: on_events(term)))
    except NoNodeError:
        return
    brokers: set[int] = set()
    for name in names:
        path = f"{LOG_DIR_EVENT_PATH}/{name}"
        try:
            data, _ = await store.get(path)
        except NoNodeError:
            continue
        broker = log_dir_event_from_json(data)
        if broker is not None:
            brokers.add(broker)
        with contextlib.suppress(NoNodeError):
            await store.delete(path)
    batch = term.batch()
    for broker in sorted(brokers):
        if not ctx.live(broker):
            continue  # gone: its replicas are offline anyway, and online again when it returns
        hosted = [tp for tp in ctx.hosted_by(broker) if tp in ctx.states]
        log.info("controller: a log directory of broker %d failed; asking for the state of "
                 "its %d replicas", broker, len(hosted))  # fmt: skip
        for tp in hosted:
            batch.add_leader_and_isr([broker], tp)
    term.send(batch)


def leader_and_isr_answered(term: Term, broker: int, response: Any) -> None:
    """(A channel callback) partitions ``broker`` answered KAFKA_STORAGE_ERROR that are not
    known offline yet become offline replicas, in an event of the term."""
    if not term.current or response is None:
        return
    ctx = term.ctx
    names = {doc.topic_id: name for name, doc in ctx.topics.items()}
    failed: set[TP] = set()
    for topic in getattr(response, "topics", ()) or ():
        name = names.get(topic.topic_id)
        if name is None:
            continue
        for p in topic.partition_errors:
            if int(p.error_code) == ErrorCode.kafka_storage_error:
                failed.add((name, int(p.partition_index)))
    known = ctx.offline_dirs.get(broker, set())
    new = failed - known
    if new:
        term.submit(lambda: replicas_offline(term, broker, new))


async def replicas_offline(term: Term, broker: int, tps: set[TP]) -> None:
    """Kafka's ``onReplicasBecomeOffline``: ``broker``'s replicas of ``tps`` are offline."""
    ctx = term.ctx
    if not ctx.live(broker):
        return
    ctx.offline_dirs.setdefault(broker, set()).update(tps)
    tps = {tp for tp in tps if tp in ctx.states}
    log.warning("controller: broker %d has %d replicas in an offline log directory",
                broker, len(tps))  # fmt: skip
    batch = term.batch()
    led = [tp for tp in sorted(tps) if ctx.states[tp].state.leader == broker]
    await term.elect_offline(led, batch)
    states = term.states()
    await states.update(sorted(tps), states.remove_from_isr(broker), batch)
    batch.add_update_metadata(ctx.live_ids(), tps)
    term.send(batch)


