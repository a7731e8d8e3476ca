"""A share consumer that acquires records and holds them (never acknowledges), for kill tests.

``python -m tests.integration.share_holder BOOTSTRAP GROUP TOPIC``: polls until it has records,
prints one line ``HELD <offset> <offset> ...`` and sleeps until it is killed.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import ShareConsumer


def main() -> None:
    bootstrap, group, topic = sys.argv[1:4]
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit", "max.poll.records": 10})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        msgs = [m for m in consumer.poll(0.5) if not m.error()]
        if msgs:
            print("HELD", *(m.offset() for m in msgs), flush=True)
            break
    time.sleep(3600)


if __name__ == "__main__":
    main()
