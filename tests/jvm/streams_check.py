"""The known answer of ``jvm/.../OrdersApp.java`` (a Kafka Streams app) and its check.

:class:`OrdersInput` makes the input (customers with regions, orders with amounts and event
times), produces it with confluent-kafka in chunks, and computes what exactly-once processing
must have committed to the three outputs; :func:`read_committed` reads an output topic as a
read_committed consumer; :meth:`OrdersInput.check` compares, per output:

* ``totals`` (customer -> running sum, one update per order): per customer, the successive
  differences of its updates are exactly its orders' amounts (none lost, none counted twice,
  whatever order the repartition topic merged them in) and the last update is their sum;
* ``window-counts`` (customer@windowStart -> count): per window, exactly the updates 1..n;
* ``enriched`` (the stream-table join): exactly one ``orderId,region,amount`` per order.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

OUTPUTS = ("totals", "window-counts", "enriched")
CUSTOMERS = 12
WINDOW_MS = 10_000
BASE_TS = 1_700_000_000_000


@dataclass
class OrdersInput:
    prefix: str
    orders: int = 600
    partitions: int = 4
    sent: int = 0
    regions: dict[str, str] = field(default_factory=dict)

    def customer(self, i: int) -> str:
        return f"c{(i * 7) % CUSTOMERS}"

    def amount(self, i: int) -> int:
        return 1 + (i * 37) % 1000

    def timestamp(self, i: int) -> int:
        return BASE_TS + 3_600_000 + i * 250  # 40 orders per 10 s window

    def create_topics(self, bootstrap: str, replication: int) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        config = {"min.insync.replicas": "2"} if replication > 1 else {}
        names = [self.prefix + n for n in ("orders", "customers", *OUTPUTS)]
        futures = admin.create_topics([NewTopic(n, self.partitions, replication, config=config)
                                       for n in names], request_timeout=30)  # fmt: skip
        for f in futures.values():
            f.result(60)

    def _producer(self, bootstrap: str) -> Producer:
        # murmur2 as Java's producer: the customers table must be partitioned as Streams
        # partitions the re-keyed orders it joins (librdkafka's default is CRC32)
        return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 120_000,
                         "partitioner": "murmur2_random"})  # fmt: skip

    def produce_customers(self, bootstrap: str) -> None:
        """The table side, older than every order (so the join finds each order's region)."""
        p = self._producer(bootstrap)
        for c in range(CUSTOMERS):
            region = ("north", "south", "east", "west")[c % 4]
            self.regions[f"c{c}"] = region
            p.produce(self.prefix + "customers", key=f"c{c}", value=region, timestamp=BASE_TS + c)
        assert p.flush(60) == 0, "customers not all delivered"

    def produce_orders(self, bootstrap: str, count: int) -> None:
        """The next ``count`` orders (key: order id; value: customer,amount)."""
        p = self._producer(bootstrap)
        errors: list[object] = []
        for i in range(self.sent, min(self.orders, self.sent + count)):
            p.produce(self.prefix + "orders", key=f"o{i}",
                      value=f"{self.customer(i)},{self.amount(i)}", timestamp=self.timestamp(i),
                      on_delivery=lambda err, _msg: err and errors.append(err))  # fmt: skip
        assert p.flush(120) == 0 and not errors, f"orders not delivered: {errors[:3]}"
        self.sent = min(self.orders, self.sent + count)

    # -- the known answer -----------------------------------------------------------------

    def expected_counts(self) -> dict[str, int]:
        """How many committed records each output must end with (one per order)."""
        return {name: self.sent for name in OUTPUTS}

    def check(self, outputs: dict[str, list[tuple[str, str]]]) -> None:
        """Assert ``outputs`` (per output, its (key, value) records in offset order per
        partition) is exactly what once-only processing of the orders sent gives."""
        orders = range(self.sent)
        amounts: dict[str, list[int]] = defaultdict(list)
        windows: Counter[str] = Counter()
        for i in orders:
            amounts[self.customer(i)].append(self.amount(i))
            start = self.timestamp(i) - self.timestamp(i) % WINDOW_MS
            windows[f"{self.customer(i)}@{start}"] += 1

        updates: dict[str, list[int]] = defaultdict(list)
        for key, value in outputs["totals"]:
            updates[key].append(int(value))
        assert set(updates) == set(amounts), "customers with totals"
        for customer, sums in updates.items():
            deltas = [b - a for a, b in zip([0, *sums], sums, strict=False)]
            assert sorted(deltas) == sorted(amounts[customer]), (
                f"totals of {customer}: the updates {sums[:20]}... do not add its orders once "
                f"each ({len(sums)} updates for {len(amounts[customer])} orders)")
            assert sums[-1] == sum(amounts[customer])

        counts: dict[str, list[int]] = defaultdict(list)
        for key, value in outputs["window-counts"]:
            counts[key].append(int(value))
        assert set(counts) == set(windows), "windows counted"
        for window, seen in counts.items():
            assert seen == list(range(1, windows[window] + 1)), f"counts of {window}: {seen}"

        expected = Counter(
            (self.customer(i), f"o{i},{self.regions[self.customer(i)]},{self.amount(i)}")
            for i in orders)  # fmt: skip
        got = Counter(outputs["enriched"])
        missing, extra = expected - got, got - expected
        assert not missing and not extra, (
            f"join output: {sum(missing.values())} missing (e.g. {list(missing)[:3]}), "
            f"{sum(extra.values())} extra or repeated (e.g. {list(extra)[:3]})")


def read_committed(bootstrap: str, topics: Iterable[str], partitions: int,
                   timeout: float = 30.0) -> dict[str, list[tuple[str, str]]]:  # fmt: skip
    """Every committed record of ``topics`` now (up to their last stable offsets)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "strom-jvm-check",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})  # fmt: skip
    try:
        parts = [TopicPartition(t, p, 0) for t in topics for p in range(partitions)]
        ends = {}
        for tp in parts:
            _low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            ends[(tp.topic, tp.partition)] = high
        consumer.assign(parts)
        out: dict[str, list[tuple[str, str]]] = {t: [] for t in topics}
        done = {k for k, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout
        while len(done) < len(ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            where = (msg.topic(), msg.partition())
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    if msg.offset() >= ends[where]:
                        done.add(where)
                    continue
                raise AssertionError(f"reading {where}: {msg.error()}")
            out[msg.topic()].append(((msg.key() or b"").decode(), (msg.value() or b"").decode()))
            if msg.offset() + 1 >= ends[where]:
                done.add(where)
        assert len(done) == len(ends), f"outputs not read to their end within {timeout} s"
        return out
    finally:
        consumer.close()
