"""ReplicaManager without a network: controller fencing, roles, leader checks, acks=all."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from strom.clock import FakeClock
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.record_batch import build_batch
from strom.replication.commands import PartitionRole
from strom.replication.replica_manager import ReplicaManager
from strom.storage.batch_validation import AppendOrigin
from strom.storage.log_manager import LogManager


@pytest.fixture
def replicas(tmp_path: Path) -> ReplicaManager:
    clock = FakeClock()
    return ReplicaManager(LogManager(tmp_path, clock, {"min.insync.replicas": "2"}), 1, clock)


def _state(leader: int, epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2),
           topic: str = "t") -> PartitionRole:  # fmt: skip
    return PartitionRole(topic, 0, leader, epoch, isr, epoch, replicas)


def _records(n: int = 1) -> bytes:
    return build_batch([(b"k", b"v", [], 0)] * n)


def test_fencing(replicas: ReplicaManager) -> None:
    assert replicas.fence(3, -1, 100) == ErrorCode.none
    assert replicas.fence(2, -1, 100) == ErrorCode.stale_controller_epoch
    assert replicas.fence(3, 99, 100) == ErrorCode.stale_broker_epoch
    assert replicas.fence(3, 100, 100) == ErrorCode.none
    assert replicas.fence(4, 5, -1) == ErrorCode.none  # no registration yet: not checked
    assert replicas.controller_epoch == 4


def test_roles_and_leader_checks(replicas: ReplicaManager) -> None:
    with pytest.raises(KafkaError) as exc:
        replicas.leader_partition("t", 0)
    assert exc.value.error_code == ErrorCode.unknown_topic_or_partition
    assert replicas.become_leader_or_follower(_state(2, 4, (1, 2)), 1, {}) == ErrorCode.none
    with pytest.raises(KafkaError) as exc:
        replicas.append("t", 0, _records())
    assert exc.value.error_code == ErrorCode.not_leader_or_follower
    # an older leader epoch than known is refused; this broker becomes leader in epoch 5
    assert replicas.become_leader_or_follower(_state(1, 3, (1, 2)), 1, {}) == (
        ErrorCode.stale_controller_epoch)  # fmt: skip
    assert replicas.become_leader_or_follower(_state(1, 5, (1, 2)), 1, {}) == ErrorCode.none
    for requested, code in ((4, ErrorCode.fenced_leader_epoch), (6, ErrorCode.unknown_leader_epoch)):
        with pytest.raises(KafkaError) as exc:
            replicas.leader_partition("t", 0, requested)
        assert exc.value.error_code == code
    result = replicas.append("t", 0, _records(2))
    log = replicas.get_log("t", 0)
    assert result.base_offset == 0 and log.leader_epochs.entries() == [(5, 0)]
    assert log.high_watermark == 0  # broker 2 has not fetched yet
    assert replicas.become_leader_or_follower(_state(1, 5, (3,), (3, 4)), 1, {}) == (
        ErrorCode.unknown_topic_or_partition)  # fmt: skip


def test_acks_all_waits_for_the_isr(replicas: ReplicaManager) -> None:
    async def run() -> None:
        replicas.become_leader_or_follower(_state(1, 1, (1, 2)), 1, {})
        part = replicas.leader_partition("t", 0)
        replicas.check_min_isr(part)
        result = replicas.append("t", 0, _records(3))
        done = replicas.delayed.watch(("t", 0), result.last_offset)
        replicas.follower_fetched(part, 2, 2)
        assert not done.done()
        replicas.follower_fetched(part, 2, 3)
        assert done.result() == ErrorCode.none
        # the ISR shrinks below min.insync.replicas while a request waits
        result = replicas.append("t", 0, _records())
        waiting = replicas.delayed.watch(("t", 0), result.last_offset)
        part.apply_isr((1,), 1, 2)
        replicas.isr_changed(part)
        assert waiting.result() == ErrorCode.not_enough_replicas_after_append
        with pytest.raises(KafkaError) as exc:
            replicas.check_min_isr(part)
        assert exc.value.error_code == ErrorCode.not_enough_replicas
    asyncio.run(run())


def test_a_waiter_outlives_the_leadership_until_its_records_fate_is_known(
        replicas: ReplicaManager) -> None:  # fmt: skip
    """Losing leadership answers nothing: the follower's truncation (records gone:
    NOT_LEADER_OR_FOLLOWER), its leader's HW passing them (NONE), or leading again with them
    committed (NONE) does; librdkafka reads NOT_LEADER_OR_FOLLOWER as "not persisted"."""
    key = ("t", 0)
    replicas.cache.brokers[2] = SimpleNamespace(node_id=2)  # type: ignore[assignment]

    async def run() -> None:
        replicas.become_leader_or_follower(_state(1, 1, (1, 2)), 1, {})
        part = replicas.leader_partition("t", 0)
        replicas.append("t", 0, _records(3))
        replicas.follower_fetched(part, 2, 3)  # HW 3
        def watch() -> asyncio.Future[ErrorCode]:
            offset = replicas.append("t", 0, _records()).last_offset
            return replicas.delayed.watch(key, offset, outlive_leadership=True)

        kept, cut = watch(), watch()
        own = replicas.delayed.watch(key, cut_offset := replicas.get_log("t", 0).log_end_offset - 1)
        assert (kept.done(), cut.done(), own.done()) == (False, False, False)
        # broker 2 leads (epoch 2): both records' fate is open; the broker's own writer (a
        # coordinator, unloaded now) is answered at once, as Kafka does
        replicas.become_leader_or_follower(_state(2, 2, (1, 2)), 1, {})
        await asyncio.sleep(0)
        assert (kept.done(), cut.done()) == (False, False)
        assert own.result() == ErrorCode.not_leader_or_follower and cut_offset == 4
        # its Fetch answers say its HW covers offset 3, which this log still holds
        replicas.follower_high_watermark(part, 4)
        assert kept.result() == ErrorCode.none and not cut.done()
        # the truncation to the leader's log removes offset 4
        log_ = replicas.get_log("t", 0)
        log_.truncate_to(4)
        replicas.truncated(key)
        assert cut.result() == ErrorCode.not_leader_or_follower
        assert replicas.delayed.waiting(key) == 0

        # leading again with the record still in the log: committed when the ISR has it
        replicas.become_leader_or_follower(_state(1, 3, (1, 2)), 1, {})
        again = watch()
        replicas.become_leader_or_follower(_state(2, 4, (1, 2)), 1, {})
        replicas.become_leader_or_follower(_state(1, 5, (1, 2)), 1, {})
        assert not again.done()
        replicas.follower_fetched(replicas.leader_partition("t", 0), 2, log_.log_end_offset)
        assert again.result() == ErrorCode.none

        # a follower whose log is replaced (below its leader's log start): gone
        gone = watch()
        replicas.become_leader_or_follower(_state(2, 6, (1, 2)), 1, {})
        log_.truncate_fully_and_start_at(100)
        replicas.truncated(key, everything=True)
        assert gone.result() == ErrorCode.not_leader_or_follower

        # the partition stopping here answers at once
        replicas.become_leader_or_follower(_state(1, 7, (1, 2)), 1, {})
        stopped = watch()
        assert replicas.stop_replica("t", 0, 7, delete=False) == ErrorCode.none
        assert stopped.result() == ErrorCode.not_leader_or_follower

    asyncio.run(run())


def test_a_waiter_is_answered_at_once_when_the_new_leader_is_unknown(
        replicas: ReplicaManager) -> None:  # fmt: skip
    """A leader this broker's metadata does not list (a stray or fuzzed LeaderAndIsr) can never
    tell it the records' fate: Kafka's NOT_LEADER_OR_FOLLOWER at once, not a wait until the
    request's timeout."""
    assert 3 not in replicas.cache.brokers

    async def run() -> None:
        replicas.become_leader_or_follower(_state(1, 1, (1, 3)), 1, {})
        offset = replicas.append("t", 0, _records()).last_offset
        waiting = replicas.delayed.watch(("t", 0), offset, outlive_leadership=True)
        replicas.become_leader_or_follower(_state(3, 2, (1, 3)), 1, {})
        assert waiting.result() == ErrorCode.not_leader_or_follower
        assert replicas.delayed.waiting(("t", 0)) == 0

    asyncio.run(run())


class _Listener:
    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def on_elected(self, partition: int, leader_epoch: int) -> None:
        self.events.append(("elected", partition, leader_epoch))

    def on_resigned(self, partition: int) -> None:
        self.events.append(("resigned", partition, -1))


def test_coordinators_hear_of_internal_partition_leadership(replicas: ReplicaManager) -> None:
    topic = "__transaction_state"
    # led before anyone listens (a single node leads before its services start)
    assert replicas.become_leader_or_follower(_state(1, 3, (1, 2), topic=topic), 1, {}) == ErrorCode.none
    early = _Listener()
    replicas.ownership.register(topic, early)
    assert early.events == [("elected", 0, 3)]
    assert replicas.get_log(topic, 0) is not None  # the log is ready when they hear
    late = _Listener()
    replicas.ownership.register("__consumer_offsets", late)
    replicas.become_leader_or_follower(_state(1, 3, (1, 2), topic=topic), 1, {})  # same epoch: no news
    replicas.become_leader_or_follower(_state(1, 4, (1, 2)), 1, {})  # not internal
    replicas.become_leader_or_follower(_state(1, 4, (1, 2), topic=topic), 1, {})  # re-elected: reload
    replicas.become_leader_or_follower(_state(2, 5, (1, 2), topic=topic), 1, {})  # a follower now
    replicas.become_leader_or_follower(_state(2, 6, (1, 2), topic=topic), 1, {})  # still following
    replicas.become_leader_or_follower(_state(1, 7, (1, 2), topic=topic), 1, {})
    replicas.stop_replica(topic, 0, 7, delete=False)
    assert early.events == [("elected", 0, 3), ("elected", 0, 4), ("resigned", 0, -1),
                            ("elected", 0, 7), ("resigned", 0, -1)]  # fmt: skip
    assert late.events == []
    assert replicas.ownership.leader_epoch(topic, 0) is None


def test_append_replicated_waits_for_the_high_watermark(replicas: ReplicaManager) -> None:
    async def run() -> None:
        replicas.become_leader_or_follower(_state(1, 1, (1,)), 1, {})
        with pytest.raises(KafkaError) as exc:  # min.insync.replicas=2, ISR [1]
            await replicas.append_replicated("t", 0, _records(), AppendOrigin.COORDINATOR, 1)
        assert exc.value.error_code == ErrorCode.not_enough_replicas
        replicas.become_leader_or_follower(_state(1, 2, (1, 2)), 1, {})
        part = replicas.leader_partition("t", 0)
        waiting = asyncio.ensure_future(
            replicas.append_replicated("t", 0, _records(2), AppendOrigin.COORDINATOR, 5))
        await asyncio.sleep(0.01)
        assert not waiting.done()  # the follower has not fetched it yet
        replicas.follower_fetched(part, 2, 2)
        assert (await waiting).last_offset == 1
        with pytest.raises(KafkaError) as exc:  # nobody fetches: the bounded wait ends
            await replicas.append_replicated("t", 0, _records(), AppendOrigin.COORDINATOR, 0.05)
        assert exc.value.error_code == ErrorCode.request_timed_out

    asyncio.run(run())


class _Proposals:
    """Stands in for the AlterPartition sender: records proposals, keeps them pending."""

    def __init__(self) -> None:
        self.proposed: list[tuple[int, ...]] = []

    def propose(self, part: object, isr: tuple[int, ...]) -> None:
        self.proposed.append(tuple(sorted(isr)))
        part.propose_isr(isr)  # type: ignore[attr-defined]


def test_a_broker_that_left_is_not_proposed_for_the_isr(replicas: ReplicaManager) -> None:
    """Seen in the SIGTERM benchmark: the new leader proposed the stopped old leader back
    into the ISR from its last fetch, and the pending (maximal) ISR held acks=all for 0.5 s."""
    from strom.replication.metadata_cache import BrokerInfo

    async def run() -> None:
        proposals = _Proposals()
        replicas.isr_changes = proposals  # type: ignore[assignment]
        replicas.cache.brokers = {1: BrokerInfo(1, "h", 1), 2: BrokerInfo(2, "h", 2)}
        replicas.become_leader_or_follower(_state(1, 1, (1, 2), (1, 2, 3)), 1, {})
        part = replicas.leader_partition("t", 0)
        result = replicas.append("t", 0, _records(2))
        done = replicas.delayed.watch(("t", 0), result.last_offset)
        replicas.follower_fetched(part, 3, 0)  # broker 3 (not alive here) is caught up
        assert proposals.proposed == [] and part.pending is None
        replicas.follower_fetched(part, 2, 2)
        assert done.result() == ErrorCode.none and part.log.high_watermark == 2
        # a live broker is proposed; while pending it holds the HW (maximal ISR) ...
        replicas.cache.brokers[3] = BrokerInfo(3, "h", 3)
        replicas.follower_fetched(part, 3, 2)
        assert proposals.proposed == [(1, 2, 3)]
        result = replicas.append("t", 0, _records())
        waiting = replicas.delayed.watch(("t", 0), result.last_offset)
        replicas.follower_fetched(part, 2, 3)
        assert not waiting.done() and part.log.high_watermark == 2
        # ... until the controller refuses it: the HW moves at once, not at the next fetch
        from strom.replication.isr_changes import IsrChangeManager

        manager = IsrChangeManager(replicas, lambda _t: None, lag_ms=30000)
        manager.apply(part, SimpleNamespace(error_code=ErrorCode.ineligible_replica))
        assert part.pending is None and part.log.high_watermark == 3
        assert waiting.result() == ErrorCode.none

    asyncio.run(run())
