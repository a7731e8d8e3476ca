"""A consume-transform-produce application with exactly-once semantics (run as a process by
test_exactly_once.py, which kills it with SIGKILL and starts it again).

Usage: python -m tests.integration.eos_app BOOTSTRAP INPUT OUTPUT GROUP TXN_ID [PAUSE_MS]
Each input record (key, value) becomes (key, b"out-" + value) in OUTPUT; the consumer's offsets
go into the same transaction (send_offsets_to_transaction), committed every 50
records at most, pausing PAUSE_MS before each commit (so a test kills it mid-transaction,
its records written, even on a busy machine). Static membership lets a restarted instance take its partitions back at once.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer


def main(bootstrap: str, source: str, sink: str, group: str, txn_id: str,
         pause_ms: str = "0") -> None:  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "linger.ms": 5, "transaction.timeout.ms": 10000})  # fmt: skip
    producer.init_transactions(30)  # aborts what a killed predecessor left open
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.instance.id": f"{group}-instance", "session.timeout.ms": 6000,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([source])
    producer.begin_transaction()
    while True:
        msgs = consumer.consume(50, 0.3)
        records = [m for m in msgs if not m.error()]
        for m in records:
            producer.produce(sink, key=m.key(), value=b"out-" + m.value())
        if not records:
            continue
        time.sleep(int(pause_ms) / 1000)  # inside the transaction, its records on their way
        try:
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(30)
        except KafkaException as exc:
            if exc.args[0].txn_requires_abort():
                producer.abort_transaction(30)
                # rewind to the committed offsets: what the aborted transaction read is redone
                for tp in consumer.committed(consumer.assignment(), 30):
                    consumer.seek(tp)
            else:
                raise
        producer.begin_transaction()


if __name__ == "__main__":
    main(*sys.argv[1:7])
