"""Which topics a sink task consumes: its ``topics`` list or its ``topics.regex``."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException

LOG = logging.getLogger("strom.connect.task")


class TopicSubscription:
    """A sink's ``topics`` list, or its ``topics.regex`` matched against the cluster's topics.

    Kafka's consumer matches a pattern with Java's ``Matcher.matches`` (the whole name) at each
    metadata refresh (``metadata.max.age.ms``, 5 min), leaving internal topics out.
    librdkafka's own ``^regex`` subscriptions use POSIX ERE and a prefix match (``orders`` would
    take ``orders-old``; ``\\d`` matches nothing), so the runtime matches with Python's ``re``
    (``fullmatch``) and subscribes to the explicit list, again whenever the matches change.
    """

    INTERNAL = frozenset({"__consumer_offsets", "__transaction_state"})

    def __init__(self, consumer: Consumer, topics: list[str], regex: str | None,
                 client_config: dict[str, Any], subscribe: Any) -> None:
        self.consumer = consumer
        self.topics = topics
        self.pattern = re.compile(regex) if regex else None
        self.subscribe = subscribe
        self.refresh_s = int(client_config.get("metadata.max.age.ms", 300000)) / 1000.0
        self.current: list[str] = []
        self.last = 0.0

    def refresh(self, first: bool = False) -> bool:
        """Subscribe (again) if due and changed; whether anything is subscribed."""
        if first and self.pattern is None:
            self.subscribe(self.consumer, self.topics)
            self.current = list(self.topics)
        if self.pattern is None or not first and time.monotonic() - self.last < self.refresh_s:
            return bool(self.current)
        self.last = time.monotonic()
        try:
            names = self.consumer.list_topics(timeout=10).topics
        except KafkaException:
            if first:
                raise  # the task fails with the reason: the cluster cannot be reached
            LOG.warning("topics.regex: listing topics failed; keeping %s", self.current)
            return bool(self.current)
        matched = sorted(t for t in names if t not in self.INTERNAL and
                         self.pattern.fullmatch(t))
        if matched != self.current:
            LOG.info("topics.regex %s matches %s", self.pattern.pattern, matched)
            if matched:
                self.subscribe(self.consumer, matched)
            else:
                self.consumer.unsubscribe()
            self.current = matched
        return bool(matched)
