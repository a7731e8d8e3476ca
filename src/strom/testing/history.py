"""A history checker for fault tests: what producers saw acknowledged vs what consumers read.

A test records every message a producer *attempted*, every *acknowledgement* (the partition and
offset the broker assigned), every definite *failure*, and every message a consumer *read*;
:meth:`History.check` then reports the anomalies Jepsen's Kafka checker looks for:

- **lost**: acknowledged, never read (the report says whether a consumer read past its offset,
  which makes the loss certain rather than a consumer that stopped early);
- **duplicated**: one value found at more than one (partition, offset), by reads or by acks
  (reading the *same* offset twice, as a consumer does after a rebalance, is not a duplicate);
- **reordered**: per partition and producer, two values whose acknowledgements came in one
  order (the order the producer's delivery reports arrived) and that were read (or, unread,
  acknowledged) at offsets in the other order;
- **inconsistent**: one (partition, offset) holding two different values, across reads or
  between a read and an acknowledgement, or a value read elsewhere than where it was
  acknowledged (replicas that diverged, a truncation gone wrong);
- **unexpected**: read but never attempted, or read though the producer was told it definitely
  failed (a false negative acknowledgement).

An acknowledgement may come without an offset (:data:`UNKNOWN_OFFSET`): librdkafka's
idempotent producer, when a later batch of a partition is acknowledged while an earlier one's
outcome was unknown (a timeout, a dropped connection), acknowledges the earlier messages
*implicitly* (``rd_kafka_dr_implicit_ack``: persisted, offset unknown). Such an ack counts for
*lost* and *duplicated* (it must be read exactly once), and for *reordered* by where it was
read; it has no offset to be *inconsistent* with.

A message is identified by its topic and value, so a test must write unique values (a counter,
a producer id plus a sequence). Keys are kept for the report only. Recording is thread-safe:
confluent-kafka calls delivery callbacks from ``poll``/``flush``, tests may run producers in
threads. The checker is pure: no clock, no I/O, so unit tests feed it histories by hand.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

#: How many examples of each anomaly the text report shows.
SHOWN = 10
#: The offset of an acknowledgement that came without one (librdkafka's implicit ack; the
#: confluent-kafka message's ``offset()`` is then None)
UNKNOWN_OFFSET = -1


@dataclass(frozen=True)
class Ack:
    """The broker acknowledged ``value`` at ``offset`` of ``topic``/``partition``
    (:data:`UNKNOWN_OFFSET` when the acknowledgement came without one)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    producer: str


@dataclass(frozen=True)
class Read:
    """A consumer read ``value`` at ``offset`` of ``topic``/``partition``."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    consumer: str


@dataclass(frozen=True)
class Anomaly:
    """One finding: its kind, the message concerned and a sentence saying what is wrong."""

    kind: str
    topic: str
    partition: int
    offset: int
    value: bytes
    detail: str

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}@{self.offset} {self.value!r}: {self.detail}"


KINDS = ("lost", "duplicated", "reordered", "inconsistent", "unexpected")


@dataclass
class Report:
    """The result of :meth:`History.check`; ``ok`` when no anomaly of any kind was found."""

    attempted: int
    acknowledged: int
    failed: int
    read: int
    distinct_read: int
    anomalies: dict[str, list[Anomaly]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    @property
    def lost(self) -> list[Anomaly]:
        return self.anomalies.get("lost", [])

    @property
    def duplicated(self) -> list[Anomaly]:
        return self.anomalies.get("duplicated", [])

    @property
    def reordered(self) -> list[Anomaly]:
        return self.anomalies.get("reordered", [])

    @property
    def inconsistent(self) -> list[Anomaly]:
        return self.anomalies.get("inconsistent", [])

    @property
    def unexpected(self) -> list[Anomaly]:
        return self.anomalies.get("unexpected", [])

    def counts(self) -> dict[str, int]:
        return {kind: len(self.anomalies.get(kind, [])) for kind in KINDS}

    def __str__(self) -> str:
        lines = [
            f"history: {self.attempted} attempted, {self.acknowledged} acknowledged, "
            f"{self.failed} failed, {self.read} read ({self.distinct_read} distinct)",
            "anomalies: "
            + (", ".join(f"{k} {n}" for k, n in self.counts().items() if n) or "none"),
        ]
        for kind in KINDS:
            found = self.anomalies.get(kind, [])
            if not found:
                continue
            lines.append(f"{kind.upper()} ({len(found)}):")
            lines += [f"  {a}" for a in found[:SHOWN]]
            if len(found) > SHOWN:
                lines.append(f"  ... and {len(found) - SHOWN} more")
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raise AssertionError with the readable report if any anomaly was found."""
        if not self.ok:
            raise AssertionError(str(self))


class History:
    """What producers attempted and saw acknowledged, and what consumers read (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attempts: list[tuple[str, bytes | None, bytes, str]] = []
        self.acks: list[Ack] = []
        self.failures: list[tuple[str, bytes, str, bool]] = []
        self.reads: list[Read] = []

    # -- recording -----------------------------------------------------------------------

    def attempt(self, topic: str, key: bytes | None, value: bytes, producer: str = "p") -> None:
        """A producer is about to send ``value`` (whatever becomes of it)."""
        with self._lock:
            self.attempts.append((topic, key, value, producer))

    def ack(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes,
        producer: str = "p",
    ) -> None:
        """The broker acknowledged ``value`` at ``partition``/``offset``."""
        with self._lock:
            self.acks.append(Ack(topic, partition, offset, key, value, producer))

    def fail(self, topic: str, value: bytes, producer: str = "p", *, definite: bool = False) -> None:
        """The producer was told the send failed. ``definite``: the broker certainly did not
        write it (a read of it is then unexpected); otherwise it may or may not be in the log."""
        with self._lock:
            self.failures.append((topic, value, producer, definite))

    def read(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes,
        consumer: str = "c",
    ) -> None:
        """A consumer read ``value`` at ``partition``/``offset``."""
        with self._lock:
            self.reads.append(Read(topic, partition, offset, key, value, consumer))

    def delivery_callback(self, producer: str = "p") -> Callable[[Any, Any], None]:
        """An ``on_delivery`` callback for confluent-kafka recording acks and failures.

        The attempt must be recorded separately (:meth:`attempt`) before ``produce``; a
        delivery error is recorded as an indefinite failure (the client cannot know)."""

        def on_delivery(err: Any, msg: Any) -> None:
            value = bytes(msg.value() or b"")
            if err is not None:
                self.fail(msg.topic(), value, producer)
            else:
                key = msg.key()
                offset = msg.offset()  # None: implicitly acknowledged (module doc)
                self.ack(msg.topic(), msg.partition(),
                         UNKNOWN_OFFSET if offset is None else offset,
                         None if key is None else bytes(key), value, producer)  # fmt: skip

        return on_delivery

    def record_message(self, msg: Any, consumer: str = "c") -> None:
        """Record a message returned by a confluent-kafka consumer's ``poll``/``consume``."""
        key = msg.key()
        self.read(msg.topic(), msg.partition(), msg.offset(),
                  None if key is None else bytes(key), bytes(msg.value() or b""), consumer)  # fmt: skip

    # -- checking ------------------------------------------------------------------------

    def check(self) -> Report:
        """Look for every anomaly in the history recorded so far."""
        with self._lock:
            attempts = list(self.attempts)
            acks = list(self.acks)
            failures = list(self.failures)
            reads = list(self.reads)
        return check(attempts, acks, failures, reads)


def check(
    attempts: Iterable[tuple[str, bytes | None, bytes, str]],
    acks: Iterable[Ack],
    failures: Iterable[tuple[str, bytes, str, bool]],
    reads: Iterable[Read],
) -> Report:
    """The checker itself (see the module docstring); :meth:`History.check` calls it."""
    attempts, acks, failures, reads = list(attempts), list(acks), list(failures), list(reads)
    found: dict[str, list[Anomaly]] = {kind: [] for kind in KINDS}

    # where each (topic, value) was seen, by reads and by acks
    read_at: dict[tuple[str, bytes], set[tuple[int, int]]] = defaultdict(set)
    acked_at: dict[tuple[str, bytes], set[tuple[int, int]]] = defaultdict(set)
    at_offset: dict[tuple[str, int, int], set[bytes]] = defaultdict(set)
    max_read: dict[tuple[str, int], int] = {}
    for r in reads:
        read_at[(r.topic, r.value)].add((r.partition, r.offset))
        at_offset[(r.topic, r.partition, r.offset)].add(r.value)
        tp = (r.topic, r.partition)
        max_read[tp] = max(max_read.get(tp, -1), r.offset)
    for a in acks:
        if a.offset != UNKNOWN_OFFSET:
            acked_at[(a.topic, a.value)].add((a.partition, a.offset))

    _lost(acks, read_at, max_read, found["lost"])
    _duplicated(read_at, acked_at, found["duplicated"])
    _inconsistent(acks, at_offset, read_at, found["inconsistent"])
    _reordered(acks, read_at, found["reordered"])
    _unexpected(reads, attempts, acks, failures, found["unexpected"])
    return Report(
        attempted=len(attempts),
        acknowledged=len(acks),
        failed=len(failures),
        read=len(reads),
        distinct_read=len(read_at),
        anomalies=found,
    )


def _lost(
    acks: list[Ack],
    read_at: dict[tuple[str, bytes], set[tuple[int, int]]],
    max_read: dict[tuple[str, int], int],
    out: list[Anomaly],
) -> None:
    for a in acks:
        if (a.topic, a.value) in read_at:
            continue
        reached = max_read.get((a.topic, a.partition), -1)
        detail = (
            f"acknowledged to {a.producer} (offset unknown), never read; reads reached "
            f"offset {reached}"
            if a.offset == UNKNOWN_OFFSET
            else f"acknowledged to {a.producer}, never read; reads reached offset {reached}"
            if reached >= a.offset
            else f"acknowledged to {a.producer}, never read; reads stopped at offset {reached}"
        )
        out.append(Anomaly("lost", a.topic, a.partition, a.offset, a.value, detail))


def _duplicated(
    read_at: dict[tuple[str, bytes], set[tuple[int, int]]],
    acked_at: dict[tuple[str, bytes], set[tuple[int, int]]],
    out: list[Anomaly],
) -> None:
    for (topic, value), places in sorted(read_at.items(), key=lambda kv: min(kv[1])):
        if len(places) > 1:
            where = ", ".join(f"{p}@{o}" for p, o in sorted(places))
            p, o = min(places)
            out.append(Anomaly("duplicated", topic, p, o, value, f"read at {where}"))
    for (topic, value), places in acked_at.items():
        if len(places) > 1 and len(read_at.get((topic, value), ())) <= 1:
            where = ", ".join(f"{p}@{o}" for p, o in sorted(places))
            p, o = min(places)
            out.append(Anomaly("duplicated", topic, p, o, value, f"acknowledged at {where}"))


def _inconsistent(
    acks: list[Ack],
    at_offset: dict[tuple[str, int, int], set[bytes]],
    read_at: dict[tuple[str, bytes], set[tuple[int, int]]],
    out: list[Anomaly],
) -> None:
    for (topic, partition, offset), values in sorted(at_offset.items()):
        if len(values) > 1:
            shown = ", ".join(repr(v) for v in sorted(values))
            out.append(Anomaly("inconsistent", topic, partition, offset, min(values),
                               f"offset read with different values: {shown}"))  # fmt: skip
    for a in acks:
        if a.offset == UNKNOWN_OFFSET:  # nothing to compare (module doc)
            continue
        there = at_offset.get((a.topic, a.partition, a.offset), set())
        if there and a.value not in there:
            shown = ", ".join(repr(v) for v in sorted(there))
            out.append(Anomaly("inconsistent", a.topic, a.partition, a.offset, a.value,
                               f"acknowledged at this offset, but read there: {shown}"))  # fmt: skip
        elif not there:
            places = read_at.get((a.topic, a.value), set())
            if places and (a.partition, a.offset) not in places:
                where = ", ".join(f"{p}@{o}" for p, o in sorted(places))
                out.append(Anomaly("inconsistent", a.topic, a.partition, a.offset, a.value,
                                   f"acknowledged at this offset, but read at {where}"))  # fmt: skip


def _reordered(
    acks: list[Ack],
    read_at: dict[tuple[str, bytes], set[tuple[int, int]]],
    out: list[Anomaly],
) -> None:
    """Per (topic, partition, producer), in the order the acknowledgements came: each value's
    place in the log (where it was read, else where it was acknowledged) must come later."""
    last: dict[tuple[str, int, str], tuple[int, Ack]] = {}
    for a in acks:
        stream = (a.topic, a.partition, a.producer)
        read = [o for p, o in read_at.get((a.topic, a.value), ()) if p == a.partition]
        place = min(read) if read else a.offset
        if place == UNKNOWN_OFFSET:  # neither read nor acknowledged at an offset: _lost's
            continue
        prev = last.get(stream)
        if prev is not None and place <= prev[0] and a.value != prev[1].value:
            how = "read" if read else "stored"
            out.append(Anomaly("reordered", a.topic, a.partition, place, a.value,
                               f"acknowledged to {a.producer} after {prev[1].value!r} (at "
                               f"offset {prev[0]}) but {how} before it"))  # fmt: skip
        if prev is None or place > prev[0]:
            last[stream] = (place, a)


def _unexpected(
    reads: list[Read],
    attempts: list[tuple[str, bytes | None, bytes, str]],
    acks: list[Ack],
    failures: list[tuple[str, bytes, str, bool]],
    out: list[Anomaly],
) -> None:
    attempted = {(t, v) for t, _k, v, _p in attempts} | {(a.topic, a.value) for a in acks}
    definitely_failed = {(t, v) for t, v, _p, definite in failures if definite}
    seen: set[tuple[str, int, int]] = set()
    for r in reads:
        place = (r.topic, r.partition, r.offset)
        if place in seen:
            continue
        if (r.topic, r.value) not in attempted:
            seen.add(place)
            out.append(Anomaly("unexpected", r.topic, r.partition, r.offset, r.value,
                               f"read by {r.consumer}, never written by any producer"))  # fmt: skip
        elif (r.topic, r.value) in definitely_failed:
            seen.add(place)
            out.append(Anomaly("unexpected", r.topic, r.partition, r.offset, r.value,
                               f"read by {r.consumer}, though its producer was told it "
                               "definitely failed"))  # fmt: skip
