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

:func:`read_brokers` and :func:`load_topic` read what these watches watch (and set them), for
the failover too.
"""

from __future__ import annotations

import asyncio
import logging

from strom.controller import deletion, reassignment
from strom.controller.context import LiveBroker, TopicDoc
from strom.controller.term import Term
from strom.metadata.store import NoNodeError
from strom.metadata.zk_model import (
    BROKER_IDS_PATH,
    TOPICS_PATH,
    BrokerRegistration,
    broker_path,
    topic_path,
)

log = logging.getLogger(__name__)


async def read_brokers(term: Term) -> dict[int, LiveBroker]:
    """The registered brokers with their epochs (``Stat.created``), watching the list."""
    store = term.store
    watch = term.watch(lambda: on_brokers(term))
    try:
        ids = await store.children(BROKER_IDS_PATH, watch=watch)
    except NoNodeError:
        await store.create(BROKER_IDS_PATH, make_parents=True)
        ids = await store.children(BROKER_IDS_PATH, watch=watch)
    found: dict[int, LiveBroker] = {}
    for name in ids:
        try:
            data, stat = await store.get(broker_path(int(name)))
        except (NoNodeError, ValueError):
            continue
        found[int(name)] = LiveBroker(BrokerRegistration.from_json(int(name), data), stat.created)
    return found


async def load_topic(term: Term, name: str) -> TopicDoc | None:
    """Read ``name``'s document and its partitions' states into the context, watching the
    document (None when the topic is gone)."""
    ctx = term.ctx
    try:
        data, _stat = await term.store.get(
            topic_path(name), watch=term.watch(lambda: on_topic_changed(term, name))
        )
    except NoNodeError:
        return None
    doc = TopicDoc.from_json(name, data)
    ctx.topics[name] = doc
    tps = [(name, p) for p in sorted(doc.assignment)]
    states = term.states()
    for tp, found in zip(tps, await asyncio.gather(*(states.read(tp) for tp in tps)),
                         strict=True):  # fmt: skip
        if found is not None:
            ctx.states[tp] = found
    return doc


async def on_brokers(term: Term) -> None:
    ctx, channel = term.ctx, term.channel
    now = await read_brokers(term)
    dead = {b for b in ctx.brokers if b not in now or now[b].epoch != ctx.brokers[b].epoch}
    new = {b for b in now if b not in ctx.brokers or b in dead}
    if dead:
        log.info("controller: brokers %s left (or restarted)", sorted(dead))
        for b in dead:
            del ctx.brokers[b]
            ctx.shutting_down.discard(b)
            ctx.offline_dirs.pop(b, None)  # a returning broker's replicas are asked afresh
            if channel is not None:
                await channel.remove_broker(b)
        await brokers_lost(term, dead)
    if new:
        log.info("controller: brokers %s joined", sorted(new))
        for b in new:
            ctx.brokers[b] = now[b]
            if channel is not None:
                channel.add_broker(b, now[b].registration)
        await brokers_joined(term, new)


async def brokers_lost(term: Term, dead: set[int]) -> None:
    ctx = term.ctx
    batch = term.batch()
    led = [tp for tp in ctx.offline() if ctx.states[tp].state.leader in dead]
    await term.elect_offline(led, batch)
    states = term.states()
    for b in sorted(dead):
        await states.update(ctx.hosted_by(b), states.remove_from_isr(b), batch)
    hosted = {tp for b in dead for tp in ctx.hosted_by(b)}
    batch.add_update_metadata(ctx.live_ids(), hosted)
    term.send(batch)
    for name in list(ctx.deletion_waits):
        for b in dead:
            deletion.replica_answered(term, name, b)


async def brokers_joined(term: Term, new: set[int]) -> None:
    ctx = term.ctx
    batch = term.batch()
    batch.add_update_metadata(new, ctx.partitions())
    batch.add_update_metadata(ctx.live_ids() - new)
    for b in new:
        for tp in ctx.hosted_by(b):
            if tp in ctx.states:
                batch.add_leader_and_isr([b], tp)
    fresh = [tp for tp in ctx.partitions() if tp not in ctx.states]
    await term.states().initialize(fresh, batch)
    await term.elect_offline(ctx.offline(), batch)
    term.send(batch)
    await reassignment.check_all(term)


async def on_topics(term: Term) -> None:
    ctx = term.ctx
    names = set(await term.store.children(TOPICS_PATH, watch=term.watch(lambda: on_topics(term))))
    for gone in set(ctx.topics) - names:
        ctx.topics.pop(gone, None)
        for tp in [tp for tp in ctx.states if tp[0] == gone]:
            del ctx.states[tp]
    batch = term.batch()
    for name in sorted(names - set(ctx.topics)):
        doc = await load_topic(term, name)
        if doc is not None:
            log.info("controller: new topic %s, %d partitions", name, len(doc.assignment))
            fresh = [(name, p) for p in sorted(doc.assignment) if (name, p) not in ctx.states]
            await term.states().initialize(fresh, batch)
            await term.elect_offline([tp for tp in ctx.offline() if tp[0] == name], batch)
    term.send(batch)


async def on_topic_changed(term: Term, name: str) -> None:
    """The topic's document changed: partitions added (CreatePartitions)."""
    ctx = term.ctx
    old = ctx.topics.get(name)
    if old is None:
        return
    try:
        data, _ = await term.store.get(
            topic_path(name), watch=term.watch(lambda: on_topic_changed(term, name))
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
    batch = term.batch()
    await term.states().initialize([(name, p) for p in added], batch)
    term.send(batch)
