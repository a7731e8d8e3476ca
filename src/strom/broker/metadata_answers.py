"""The Metadata handler's per-broker cache of topic entries and encoded bodies.

A 10,000-partition topic took ~100 ms to build and encode per request, all on the event loop:
:mod:`strom.broker.handlers.metadata` keeps each topic's entry per response version, and
whole encoded bodies while the same entries are answered (its module doc says when they are
reused). One cache per broker (the assembly makes it): entries are keyed by the identity of
that broker's ``TopicInfo`` objects and by its metadata cache's version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.metadata.topics import TopicInfo
    from strom.protocol.hot_path import EncodedBody


class MetadataAnswers:
    MAX_BODIES = 64
    MAX_TOPICS = 10_000

    def __init__(self) -> None:
        #: (version, topic, listener) -> (info, its replicas, partition count, cache version,
        #: entry): a leader without an endpoint on the listener is an error on that one
        self.topics: dict[tuple[int, str, str], tuple[TopicInfo, Any, int, int, Any]] = {}
        #: (version, cache version, listener, ids of the entries) -> (the entries, body)
        self.bodies: dict[tuple[Any, ...], tuple[tuple[Any, ...], EncodedBody]] = {}
