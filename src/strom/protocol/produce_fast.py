"""The single-partition Produce request, read and answered without ``kio`` (sans-IO).

The connection core (:mod:`strom.broker.connection`) reads every Produce frame with
:class:`SingleProduceReader` first: what it returns is the same
:class:`~strom.protocol.produce_request.ProduceRequest` that ``kio``'s decode gives
(:func:`~strom.protocol.produce_request.from_kio`), so the request takes the one Produce path;
its success answer is written from a :class:`ResponseTemplate`.

Why: nearly every Produce request a producer with ``linger.ms=0`` sends holds one topic with
one partition, and for such a request the generic path (the pre-decode walk of
:mod:`strom.protocol.request_check`, ``kio``'s decode into objects, the response built as
tuples and encoded field by field) cost a third of the broker's CPU for it. Here a request of
exactly that shape is read with a few ``struct`` calls, and answered from a per-(version,
topic) template: one ``pack`` of the size, correlation id, partition index and the three
offsets.

:func:`parse_single` accepts only what it fully understands, and returns ``None`` for
anything else, which then takes the generic path (and gets that path's answer or error):
versions 3–12 (v13 names topics by id), one topic with one partition, a non-null topic name
and non-null records, no tagged fields anywhere, every length inside the frame. Bytes after
the body make it ``None`` too (the generic path ignores them, as Kafka does).

Wire layout (Kafka's ``ProduceRequest.json``; request header v1, v2 from v9 — its client id
stays an int16-length string; ``[flex]``: compact lengths as uvarint(n + 1) and an empty
tag section after each struct from v9): ``header: api_key int16, api_version int16,
correlation_id int32, client_id nullable string, [flex] tags``, ``transactional_id: nullable
string, acks: int16, timeout_ms: int32, topic_data: [name: string, partition_data: [index:
int32, records: nullable bytes, [flex] tags], [flex] tags], [flex] tags``.

Invariant, tested for every version (``tests/unit/protocol/test_produce_fast.py``): what
:func:`parse_single` returns equals ``kio``'s decode of the same frame (header, and the request
through :func:`~strom.protocol.produce_request.from_kio`), and
:meth:`ResponseTemplate.frame` writes the bytes :func:`strom.protocol.hot_path.produce_frame`
(itself byte-compared with ``kio``) writes for the same single-partition answer.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from strom.protocol.hot_path import ProducePartition, ProduceResponse, produce_frame
from strom.protocol.messages import RequestHeader
from strom.protocol.produce_request import ProduceRequest
from strom.protocol.varint import read_uvarint

_HEAD = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_ACKS_TIMEOUT = struct.Struct(">hi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I32_I32 = struct.Struct(">ii")
_FIRST_FLEXIBLE = 9
_new = tuple.__new__  # a NamedTuple from a plain tuple, without keyword handling
VERSIONS = range(3, 13)
Read = tuple[RequestHeader, ProduceRequest]


class _Single(NamedTuple):
    """What a single-partition Produce frame holds."""

    correlation_id: int
    client_id: str | None
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic: str
    partition: int
    records: bytes


def parse_single(frame: bytes) -> Read | None:
    """The header and request in ``frame`` (the bytes after the size prefix) if it is a
    single-partition Produce v3–12 (module doc), else ``None``. Never raises."""
    try:
        parsed = _parse(frame)
    except (IndexError, ValueError, struct.error, UnicodeDecodeError):
        return None
    if parsed is None:
        return None
    s = parsed[0]
    return (RequestHeader(0, frame[3], s.correlation_id, s.client_id),
            ProduceRequest(s.transactional_id, s.acks, s.timeout_ms,
                           ((s.topic, None, (s.partition,)),), (s.records,)))  # fmt: skip


class SingleProduceReader:
    """:func:`parse_single` for one connection, remembering the last request's bytes up to
    its partition index: a producer sends the same client id, transactional id, acks,
    timeout and topic request after request, so when a frame starts with those same bytes
    (after the correlation id) only the correlation id, the partition index and the records
    are read. The partition is read, not remembered: a producer writing round-robin over
    many partitions of a topic (each request to the next one) keeps the shortcut.

    ``parses`` counts the frames read the long way (:func:`_parse`): on one producer's
    connection it stays at the number of distinct (version, client id, transactional id,
    acks, timeout, topic) layouts met in a row, whatever the partitions."""

    __slots__ = ("_head", "_fixed", "_fixed_end", "_flexible", "_last", "_partition", "_topics",
                 "parses")

    def __init__(self) -> None:
        self._head = b""  # api key and version
        self._fixed = b""  # from after the correlation id to the partition index
        self._fixed_end = 0  # where the records' length field starts (after the index)
        self._flexible = False
        self._last: _Single | None = None
        # the last request's partition and topics field, reused while the partition stays
        self._partition = -1
        self._topics: tuple[tuple[str, None, tuple[int]], ...] = ()
        self.parses = 0

    def read(self, frame: bytes) -> Read | None:
        """:func:`parse_single` of ``frame`` (module doc); per request only the header, the
        request and its records tuple are new (this runs for nearly every request), and the
        topics field when the partition changed."""
        last = self._last
        pos = self._fixed_end
        end = len(frame)
        if (last is not None and self._flexible and end - pos > 5
                and frame.startswith(self._head) and frame.startswith(self._fixed, 8)):  # fmt: skip
            partition = _I32.unpack_from(frame, pos - 4)[0]
            topics = self._topics
            if partition != self._partition:
                topics = self._topics_of(last[5], partition)
            # inline: a records length of 1-2 bytes
            n = frame[pos]
            if n >= 0x80:
                if frame[pos + 1] >= 0x80:
                    return self._request(frame, self._slow_records(frame, last, partition))
                n = (n & 0x7F) | (frame[pos + 1] << 7)
                pos += 1
            # n - 1 bytes of records, then the three empty tag sections (module doc)
            if n and pos + n + 3 == end and frame.endswith(b"\0\0\0"):
                return (_new(RequestHeader, (0, frame[3], _I32.unpack_from(frame, 4)[0],
                                             last[1])),
                        _new(ProduceRequest, (last[2], last[3], last[4], topics,
                                              (frame[pos + 1 : pos + n],))))  # fmt: skip
            return None
        return self._request(frame, self._read(frame))

    def _topics_of(self, topic: str, partition: int) -> tuple[tuple[str, None, tuple[int]]]:
        self._partition = partition
        topics = self._topics = ((topic, None, (partition,)),)
        return topics

    def _request(self, frame: bytes, s: _Single | None) -> Read | None:
        if s is None:
            return None
        topics = self._topics
        if s[6] != self._partition:
            topics = self._topics_of(s[5], s[6])
        return (_new(RequestHeader, (0, frame[3], s[0], s[1])),
                _new(ProduceRequest, (s[2], s[3], s[4], topics, (s[7],))))  # fmt: skip

    def _read(self, frame: bytes) -> _Single | None:
        last = self._last
        pos = self._fixed_end
        end = len(frame)
        if (last is not None and end > pos and frame.startswith(self._head)
                and frame.startswith(self._fixed, 8)):  # fmt: skip
            partition = _I32.unpack_from(frame, pos - 4)[0]
            if self._flexible and end - pos > 5:  # handled by read(): a long records length
                n = frame[pos]
                if n >= 0x80 and frame[pos + 1] >= 0x80:
                    return self._slow_records(frame, last, partition)
                return None
            return self._slow_records(frame, last, partition)
        self.parses += 1
        try:
            parsed = _parse(frame)
        except (IndexError, ValueError, struct.error, UnicodeDecodeError):
            return None
        if parsed is None:
            return None
        request, fixed_end = parsed
        self._head, self._fixed = frame[:4], frame[8 : fixed_end - 4]
        self._fixed_end = fixed_end
        self._flexible = frame[3] >= _FIRST_FLEXIBLE  # the version's low byte (3-12)
        self._last = request._replace(records=b"")
        self._topics_of(request.topic, request.partition)
        return request

    def _slow_records(self, frame: bytes, last: _Single, partition: int) -> _Single | None:
        try:
            records = _records(frame, self._fixed_end, self._flexible)
        except (IndexError, ValueError, struct.error):
            return None
        if records is None:
            return None
        return _new(_Single, (_I32.unpack_from(frame, 4)[0], last[1], last[2], last[3], last[4],
                              last[5], partition, records))  # fmt: skip


def _parse(frame: bytes) -> tuple[_Single, int] | None:
    api_key, version, correlation_id, n = _HEAD.unpack_from(frame, 0)
    if api_key != 0 or not 3 <= version <= 12:
        return None
    pos = 10
    end = len(frame)
    client_id = None
    if n >= 0:
        if pos + n > end:
            return None
        client_id = frame[pos : pos + n].decode()
        pos += n
    elif n != -1:
        return None
    flexible = version >= _FIRST_FLEXIBLE
    if flexible:
        if frame[pos] != 0:  # header tags: none expected from clients
            return None
        pos += 1
        n, pos = read_uvarint(frame, pos)
        n -= 1
    else:
        (n,) = _I16.unpack_from(frame, pos)
        pos += 2
    transactional_id = None
    if n >= 0:
        if pos + n > end:
            return None
        transactional_id = frame[pos : pos + n].decode()
        pos += n
    elif n != -1:
        return None
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    pos += 6
    if flexible:
        if frame[pos] != 2:  # one topic
            return None
        n, pos = read_uvarint(frame, pos + 1)
        n -= 1
    else:
        if _I32.unpack_from(frame, pos)[0] != 1:
            return None
        (n,) = _I16.unpack_from(frame, pos + 4)
        pos += 6
    if n < 0 or pos + n > end:  # a null topic name: the generic path answers it
        return None
    topic = frame[pos : pos + n].decode()
    pos += n
    if flexible:
        if frame[pos] != 2:  # one partition
            return None
        (partition,) = _I32.unpack_from(frame, pos + 1)
        fixed_end = pos + 5
    else:
        if _I32.unpack_from(frame, pos)[0] != 1:
            return None
        (partition,) = _I32.unpack_from(frame, pos + 4)
        fixed_end = pos + 8
    request = _Single(correlation_id, client_id, transactional_id, acks, timeout_ms, topic,
                      partition, b"")  # fmt: skip
    records = _records(frame, fixed_end, flexible)
    if records is None:
        return None
    return request._replace(records=records), fixed_end


def _records(frame: bytes, pos: int, flexible: bool) -> bytes | None:
    """The records field at ``pos`` if it is non-null, inside the frame and followed by
    exactly the empty tag sections that end the request."""
    end = len(frame)
    if flexible:
        n, pos = read_uvarint(frame, pos)
        n -= 1
    else:
        (n,) = _I32.unpack_from(frame, pos)
        pos += 4
    if n < 0 or pos + n > end:  # null records: the generic path answers it
        return None
    if flexible:  # the partition's, the topic's and the request's tags: all empty
        if pos + n + 3 != end or frame[pos + n :] != b"\0\0\0":
            return None
    elif pos + n != end:
        return None
    return frame[pos : pos + n]


class ResponseTemplate:
    """The response to a single-partition Produce of one (version, topic) whose partition has
    no error message and no record errors: everything but the correlation id, the partition
    index and the offsets is fixed, and written by one ``pack``. One template serves every
    partition of the topic, so a producer writing to 10,000 partitions costs one template,
    not one per partition."""

    __slots__ = ("_pack", "_size", "_head", "_mid", "_tail", "_lso")

    def __init__(self, version: int, topic: str) -> None:
        # Cut samples written by the general encoder around the variable fields, so the
        # template cannot drift from it: two partition indexes show where the index is.
        def sample(partition: int) -> bytes:
            return produce_frame(version, 0, ProduceResponse([(topic, [ProducePartition(
                partition, 0, 0, 0, 0)])]))  # fmt: skip

        whole, other = sample(0), sample(-1)
        tail = _suffix(version)
        self._lso = version >= 5
        offsets = 24 if self._lso else 16
        mid_end = len(whole) - len(tail) - offsets
        if not whole.endswith(bytes(offsets) + tail):
            raise RuntimeError(f"produce response v{version} does not end as expected")
        at = next((i for i in range(len(whole)) if whole[i] != other[i]), -1)
        if (len(other) != len(whole) or at < 8 or other[at : at + 4] != b"\xff" * 4
                or whole[at + 4 :] != other[at + 4 :]):  # fmt: skip
            raise RuntimeError(f"produce response v{version}: partition index not found")
        self._head = whole[8:at]
        self._mid = whole[at + 4 : mid_end]  # the error code (none)
        self._tail = tail
        self._size = len(whole) - 4
        fmt = (f">ii{len(self._head)}si{len(self._mid)}s{'qqq' if self._lso else 'qq'}"
               f"{len(tail)}s")  # fmt: skip
        self._pack = struct.Struct(fmt).pack

    def frame(self, correlation_id: int, partition: int, base_offset: int,
              log_append_time: int, log_start_offset: int) -> bytes:  # fmt: skip
        """The whole response frame, size prefix included."""
        if self._lso:
            return self._pack(self._size, correlation_id, self._head, partition, self._mid,
                              base_offset, log_append_time, log_start_offset,
                              self._tail)  # fmt: skip
        return self._pack(self._size, correlation_id, self._head, partition, self._mid,
                          base_offset, log_append_time, self._tail)  # fmt: skip


def _suffix(version: int) -> bytes:
    """What follows the partition's offsets in a template's response: [record_errors (empty),
    error_message (null)] (v8+), [partition tags, topic tags], throttle_time_ms (0), [tags]."""
    flexible = version >= _FIRST_FLEXIBLE
    out = b""
    if version >= 8:
        out += b"\x01\x00" if flexible else b"\0\0\0\0\xff\xff"
    if flexible:
        out += b"\0\0"
    out += b"\0\0\0\0"
    if flexible:
        out += b"\0"
    return out


class OnePartition(NamedTuple):
    """The answer to a Produce request of one partition that was appended (no error, message,
    record errors or leader hint): written from a template, without looking at it further."""

    topic: str
    partition: ProducePartition


class ResponseTemplates:
    """One connection's :class:`ResponseTemplate` per (version, topic), used for every
    Produce answer they fit (one topic, one partition, no error, message, record errors,
    leader hint or throttle); any other answer is written by :func:`produce_frame`. At most
    :attr:`MAX` templates (cleared when full). The partition is not part of the key: a
    producer writing round-robin over a topic's 10,000 partitions costs one template.
    ``len()`` is the number kept."""

    MAX = 4096
    __slots__ = ("_templates",)

    def __init__(self) -> None:
        self._templates: dict[tuple[int, str], ResponseTemplate] = {}

    def __len__(self) -> int:
        return len(self._templates)

    def frame(self, version: int, correlation_id: int, response: ProduceResponse) -> bytes:
        """The whole response frame, size prefix included."""
        # By index, not by name: this runs for nearly every request. One partition without a
        # leader hint has no node endpoints either.
        topics = response[0]
        if len(topics) == 1 and not response[1]:
            entry = topics[0]
            parts = entry[1]
            if len(parts) == 1:
                part = parts[0]  # ProducePartition: no error code, message, record errors, hint
                if not part[1] and part[5] is None and not part[6] and part[7] is None:
                    if not 3 <= version <= 12:
                        return produce_frame(version, correlation_id, response)
                    return self._template(version, entry[0]).frame(
                        correlation_id, part[0], part[2], part[3], part[4])  # fmt: skip
        return produce_frame(version, correlation_id, response)

    def one(self, version: int, correlation_id: int, answer: OnePartition) -> bytes:
        """The frame of an :class:`OnePartition` answer (versions 3-12)."""
        part = answer[1]
        template = self._templates.get((version, answer[0]))
        if template is None:
            template = self._template(version, answer[0])
        return template.frame(correlation_id, part[0], part[2], part[3], part[4])

    def _template(self, version: int, topic: str) -> ResponseTemplate:
        key = (version, topic)
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= self.MAX:
                self._templates.clear()
            template = self._templates[key] = ResponseTemplate(version, topic)
        return template
