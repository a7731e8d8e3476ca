"""The start of a term of office (Kafka's ``onControllerFailover``).

Live brokers with their epochs, topics, partition states and pending deletions are read
(watches set on ``/brokers/ids``, ``/brokers/topics``, each topic, ``/admin/delete_topics``);
every live broker gets UpdateMetadata for every partition; partitions without a state get one;
partitions whose leader is not live get one elected from the ISR (unclean only where
``unclean.leader.election.enable``); replicas on brokers that are gone leave the ISRs; every
live replica gets LeaderAndIsr; unfinished reassignments and deletions resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools

from strom.controller import changes, deletion, log_dirs, reassignment
from strom.controller.term import Term
from strom.metadata.store import NodeExistsError, NoNodeError
from strom.metadata.zk_model import (
    BROKER_IDS_PATH,
    DELETE_TOPICS_PATH,
    TOPIC_CONFIGS_PATH,
    TOPICS_PATH,
)

#: Kafka's makeSurePersistentPathsExist: the controller's watches need them
PERSISTENT_PATHS = (BROKER_IDS_PATH, TOPICS_PATH, TOPIC_CONFIGS_PATH, DELETE_TOPICS_PATH)


async def take_office(term: Term) -> None:
    ctx, store = term.ctx, term.store
    term.leader_and_isr_answered = functools.partial(log_dirs.leader_and_isr_answered, term)
    for path in PERSISTENT_PATHS:
        if await store.exists(path) is None:
            with contextlib.suppress(NodeExistsError):
                await store.create(path, make_parents=True)
    for broker_id, live in (await changes.read_brokers(term)).items():
        ctx.brokers[broker_id] = live
        if term.channel is not None:
            term.channel.add_broker(broker_id, live.registration)
    try:
        names = await store.children(TOPICS_PATH, watch=term.watch(lambda: changes.on_topics(term)))
    except NoNodeError:
        names = []
    await asyncio.gather(*(changes.load_topic(term, name) for name in names))
    batch = term.batch()
    batch.add_update_metadata(ctx.live_ids(), ctx.partitions())
    fresh = [tp for tp in ctx.partitions() if tp not in ctx.states]
    await term.states().initialize(fresh, batch)
    await term.elect_offline(ctx.offline(), batch)
    states = term.states()
    for dead in sorted({b for tp in ctx.partitions() for b in ctx.offline_replicas(tp)}):
        await states.update(ctx.hosted_by(dead), states.remove_from_isr(dead), batch)
    for tp in ctx.partitions():
        if tp in ctx.states:
            batch.add_leader_and_isr(ctx.replicas(tp), tp)
    term.send(batch)
    await reassignment.resume(term)
    await deletion.on_delete_requests(term)
    await log_dirs.watch_events(term)
