"""The Produce request as the broker handles it, whichever way it was read.

A Produce request reaches the Produce handler in one shape, :class:`ProduceRequest`, whether
the connection read it with the single-partition reader (:mod:`strom.protocol.produce_fast`,
no ``kio``) or decoded it with ``kio`` (:func:`from_kio`), so there is one Produce path with one
set of checks.

Layout: ``topics`` addresses the partitions, in request order: (topic name, topic id,
partition indexes) per topic (v13 names topics by id: the name is then None and the id set;
before it the id is None); ``records`` holds each of those partitions' records, in the same
order (one entry per partition index, None for null records). Keeping the records apart lets
a connection reuse the ``topics`` of a producer that writes the same partition request after
request: only the records, the correlation id and this tuple are new per request.
``timeout_ms`` is the request's timeout in milliseconds (``kio`` gives a ``timedelta``).

:func:`error_response` is Produce's ``getErrorResponse``: the answer to a request the handler
could not serve, every partition with the error (offsets -1), in the response model that
:mod:`strom.protocol.hot_path` encodes.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any, NamedTuple

from strom.protocol.hot_path import ProducePartition, ProduceResponse

_MS = datetime.timedelta(milliseconds=1)
#: (topic name or None, topic id or None, partition indexes)
TopicPartitions = tuple[str | None, uuid.UUID | None, tuple[int, ...]]


class ProduceRequest(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: tuple[TopicPartitions, ...]
    records: tuple[bytes | None, ...]  # per partition of ``topics``, in order

    def partitions(self) -> list[tuple[str | None, uuid.UUID | None, int, bytes | None]]:
        """(topic name, topic id, partition index, records) of every partition, in order."""
        records = iter(self.records)
        return [(name, topic_id, index, next(records))
                for name, topic_id, indexes in self.topics for index in indexes]  # fmt: skip


def from_kio(request: Any) -> ProduceRequest:
    """The ``kio`` decode of a Produce request (any served version) as a :class:`ProduceRequest`."""
    topics = tuple((getattr(t, "name", None), getattr(t, "topic_id", None),
                    tuple(int(p.index) for p in t.partition_data))
                   for t in request.topic_data)  # fmt: skip
    records = tuple(p.records for t in request.topic_data for p in t.partition_data)
    return ProduceRequest(request.transactional_id, int(request.acks), request.timeout // _MS,
                          topics, records)  # fmt: skip


def error_response(request: ProduceRequest, code: int, message: str | None) -> ProduceResponse:
    """Every partition of ``request`` answered ``code`` with ``message`` (module doc)."""
    return ProduceResponse([
        (name, [ProducePartition(index, code, error_message=message) for index in indexes],
         topic_id)
        for name, topic_id, indexes in request.topics
    ])  # fmt: skip
