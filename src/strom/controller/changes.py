"""Membership and topic changes seen by the controller's watches (Kafka's ``BrokerChange``,
``TopicChange`` and ``PartitionModifications`` events).

Brokers: the children of ``/brokers/ids`` are compared with the context; a broker gone, or
back with a new epoch (a restart within the session timeout), is lost: partitions it led get
a leader elected from the ISR (unclean only where enabled), it leaves every ISR (the last
member stays, leader -1), every broker hears of it; a new or returning broker gets
UpdateMetadata for every partition and LeaderAndIsr for its replicas, and offline partitions
it can lead are elected again; a reassignment waiting for it may complete.

Topics: a new child of ``/brokers/topics`` gets its partitions' first states; a topic's
document growing (CreatePartitions) gets the new partitions' states.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from strom.controller import reassignment, topics
from strom.controller.context import TopicDoc
from strom.metadata.store import NoNodeError
from strom.metadata.zk_model import TOPICS_PATH, topic_path

if TYPE_CHECKING:
    from strom.controller.controller import Controller

log = logging.getLogger(__name__)


async def on_brokers(c: Controller) -> None:
    ctx, channel = c._context()
    now = await c._read_brokers()
    dead = {b for b in ctx.brokers if b not in now or now[b].epoch != ctx.brokers[b].epoch}
    new = {b for b in now if b not in ctx.brokers or b in dead}
    if dead:
        log.info("controller: brokers %s left (or restarted)", sorted(dead))
        for b in dead:
            del ctx.brokers[b]
            ctx.shutting_down.discard(b)
            await channel.remove_broker(b)
        await brokers_lost(c, dead)
    if new:
        log.info("controller: brokers %s joined", sorted(new))
        for b in new:
            ctx.brokers[b] = now[b]
            channel.add_broker(b, now[b].registration)
        await brokers_joined(c, new)


async def brokers_lost(c: Controller, dead: set[int]) -> None:
    ctx, _ = c._context()
    batch = c.batch()
    led = [tp for tp in ctx.offline() if ctx.states[tp].state.leader in dead]
    await c._elect_offline(led, batch)
    states = c.states()
    for b in sorted(dead):
        await states.update(ctx.hosted_by(b), states.remove_from_isr(b), batch)
    hosted = {tp for b in dead for tp in ctx.hosted_by(b)}
    batch.add_update_metadata(ctx.live_ids(), hosted)
    c.send(batch)
    for name in list(ctx.deletion_waits):
        for b in dead:
            topics.replica_answered(c, name, b)


async def brokers_joined(c: Controller, new: set[int]) -> None:
    ctx, _ = c._context()
    batch = c.batch()
    batch.add_update_metadata(new, ctx.partitions())
    batch.add_update_metadata(ctx.live_ids() - new)
    for b in new:
        for tp in ctx.hosted_by(b):
            if tp in ctx.states:
                batch.add_leader_and_isr([b], tp)
    fresh = [tp for tp in ctx.partitions() if tp not in ctx.states]
    await c.states().initialize(fresh, batch)
    await c._elect_offline(ctx.offline(), batch)
    c.send(batch)
    await reassignment.check_all(c)


async def on_topics(c: Controller) -> None:
    ctx, _ = c._context()
    names = set(await c.store.children(TOPICS_PATH, watch=c._watch(lambda: on_topics(c))))
    for gone in set(ctx.topics) - names:
        ctx.topics.pop(gone, None)
        for tp in [tp for tp in ctx.states if tp[0] == gone]:
            del ctx.states[tp]
    batch = c.batch()
    for name in sorted(names - set(ctx.topics)):
        doc = await c._load_topic(name)
        if doc is not None:
            log.info("controller: new topic %s, %d partitions", name, len(doc.assignment))
            fresh = [(name, p) for p in sorted(doc.assignment) if (name, p) not in ctx.states]
            await c.states().initialize(fresh, batch)
            await c._elect_offline([tp for tp in ctx.offline() if tp[0] == name], batch)
    c.send(batch)


async def on_topic_changed(c: Controller, name: str) -> None:
    """The topic's document changed: partitions added (CreatePartitions)."""
    ctx, _ = c._context()
    old = ctx.topics.get(name)
    if old is None:
        return
    try:
        data, _ = await c.store.get(
            topic_path(name), watch=c._watch(lambda: on_topic_changed(c, name))
        )
    except NoNodeError:
        return
    doc = TopicDoc.from_json(name, data)
    added = sorted(set(doc.assignment) - set(old.assignment))
    if not added:
        return
    for p in added:
        old.assignment[p] = doc.assignment[p]
    log.info("controller: topic %s grew by partitions %s", name, added)
    batch = c.batch()
    await c.states().initialize([(name, p) for p in added], batch)
    c.send(batch)
