"""Seeded protocol fuzzing: frames a broker must survive, from one ``random.Random``.

:class:`FrameFuzzer` yields ``(kind, frame)`` pairs, size prefix included. Every API key ``kio``
knows (and a few it does not), every version (and a few beyond), with bodies that are valid
(random but well-formed, :mod:`strom.testing.samples`), truncated, extended, mutated, given a
lying length, or a Produce whose record batch is mutated (CRC, lengths, counts, magic, codec,
compressed garbage, control bit), plus size prefixes that are negative, zero or huge.

The same seed gives the same frames, so a failure reproduces from the seed alone.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import crc32c
from kio.schema.index import api_key_map, schema_name_map

from strom.protocol.messages import RequestHeader, build, encode_request, request_class
from strom.protocol.record_batch import build_batch
from strom.testing.samples import sample

__all__ = ["FrameFuzzer"]

_HUGE_LENGTHS = [
    b"\xff\xff\xff\xff\x0f",  # uvarint 2**32 - 1
    b"\x80\x80\x80\x80\x08",  # uvarint 2**31
    b"\xff\xff\xff\xff\xff\xff",  # a varint that never ends
    struct.pack(">i", 0x7FFFFFFF),
    struct.pack(">i", -2),
    struct.pack(">h", 0x7FFF),
    struct.pack(">h", -3),
]
_CRC_FROM = 21  # CRC-32C covers attributes (offset 21) to the end of the batch


class FrameFuzzer:
    """Generates fuzz frames; ``skip_keys`` are never sent (APIs whose valid use is a test's
    own business, such as creating a billion partitions)."""

    def __init__(
        self,
        rng: random.Random,
        produce_topics: Sequence[str],
        skip_keys: Sequence[int] = (),
        max_wait_ms: int = 200,
        served: dict[int, tuple[int, int]] | None = None,
    ) -> None:
        self.rng = rng
        self.produce_topics = list(produce_topics)
        self.max_wait_ms = max_wait_ms
        self.apis: list[tuple[int, list[int]]] = []
        for key, name in sorted(api_key_map.items()):
            if key in skip_keys:
                continue
            versions = []
            for version in sorted(schema_name_map[name]):
                try:
                    request_class(key, version)
                except Exception:
                    continue
                versions.append(version)
            if versions:
                self.apis.append((key, versions))
        # APIs the broker serves (from its ApiVersions) are picked 3 times in 4, so most frames
        # reach a handler instead of the "not served" refusal.
        self.served = [
            (key, [v for v in versions if served[key][0] <= v <= served[key][1]])
            for key, versions in self.apis
            if served and key in served
        ]
        self.served = [(key, versions) for key, versions in self.served if versions]
        self.correlation = 0

    def frames(self, count: int) -> Iterator[tuple[str, bytes]]:
        for _ in range(count):
            yield self.frame()

    def frame(self) -> tuple[str, bytes]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.2:
            kind, body = "produce-batch", self._produce_payload()
        else:
            body = self._valid_payload()
            if roll < 0.35:
                kind = "valid"
            elif roll < 0.5:
                kind, body = "truncated", body[: rng.randint(0, max(len(body) - 1, 0))]
            elif roll < 0.58:
                kind, body = "extended", body + rng.randbytes(rng.randint(1, 64))
            elif roll < 0.78:
                kind, body = "mutated", self._mutate(body)
            elif roll < 0.93:
                kind, body = "lying-length", self._lie(body)
            elif roll < 0.96:
                kind, body = "odd-api", self._odd_api(body)
            else:
                return "bad-size", self._bad_size(body)
        return kind, struct.pack(">i", len(body)) + body

    # bodies ----------------------------------------------------------------------------------
    def _next_correlation(self) -> int:
        self.correlation += 1
        return self.correlation

    def _valid_payload(self) -> bytes:
        pool = self.served if self.served and self.rng.random() < 0.75 else self.apis
        key, versions = self.rng.choice(pool)
        version = self.rng.choice(versions)
        req = sample(request_class(key, version), self.rng, self.max_wait_ms)
        header = RequestHeader(key, version, self._next_correlation(), "fuzz")
        return encode_request(header, req)[4:]

    def _produce_payload(self) -> bytes:
        rng = self.rng
        version = rng.randint(3, 12)
        mod = __import__(f"kio.schema.produce.v{version}.request", fromlist=["x"])
        batch = self._mutated_batch()
        req = build(
            request_class(0, version),
            transactional_id=None,
            acks=rng.choice([-1, 1, 1, 0]),
            timeout=__import__("datetime").timedelta(milliseconds=rng.randint(0, 500)),
            topic_data=(
                build(
                    mod.TopicProduceData,
                    name=rng.choice(self.produce_topics),
                    partition_data=(
                        build(mod.PartitionProduceData, index=rng.randint(-1, 3), records=batch),
                    ),
                ),
            ),
        )
        header = RequestHeader(0, version, self._next_correlation(), "fuzz")
        return encode_request(header, req)[4:]

    def _mutated_batch(self) -> bytes:
        rng = self.rng
        records: list[tuple[bytes | None, bytes, list[Any], int]] = [
            (rng.choice([None, b"k"]), rng.randbytes(rng.randint(0, 40)), [], 1_700_000_000_000)
            for _ in range(rng.randint(1, 5))
        ]
        batch = bytearray(build_batch(records))
        how = rng.randrange(10)
        if how == 0:
            batch[17 + rng.randrange(4)] ^= 0xFF  # CRC
            return bytes(batch)
        if how == 1:  # batch length
            struct.pack_into(">i", batch, 8, rng.choice([0, -1, 1 << 30, len(batch) - 11, len(batch)]))
            return bytes(batch)
        if how == 2:  # record count
            struct.pack_into(">i", batch, 57, rng.choice([0, -1, 0x7FFFFFFF, len(records) + 1]))
        elif how == 3:  # magic
            batch[16] = rng.choice([0, 1, 3, 255])
            return bytes(batch)
        elif how == 4:  # codec bits on an uncompressed body (5-7 are no codec at all)
            batch[22] = (batch[22] & 0xF8) | rng.randint(1, 7)
        elif how == 5:  # compressed garbage behind a valid codec
            batch[22] = (batch[22] & 0xF8) | rng.randint(1, 4)
            batch[61:] = rng.randbytes(rng.randint(0, 200))
            struct.pack_into(">i", batch, 8, len(batch) - 12)
        elif how == 6:  # control bit from a client
            batch[22] |= 0x20
        elif how == 7:  # a byte inside the records (varints, deltas, lengths)
            if len(batch) > 61:
                batch[rng.randrange(61, len(batch))] = rng.randrange(256)
        elif how == 8:  # truncated
            return bytes(batch[: rng.randrange(len(batch))])
        else:  # two batches for one partition
            return bytes(batch) + build_batch(records[:1])
        struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[_CRC_FROM:])))
        return bytes(batch)

    # mutations -------------------------------------------------------------------------------
    def _mutate(self, body: bytes) -> bytes:
        data = bytearray(body)
        if len(data) <= 8:
            return bytes(data)
        for _ in range(self.rng.randint(1, 4)):
            data[self.rng.randrange(8, len(data))] = self.rng.randrange(256)
        return bytes(data)

    def _lie(self, body: bytes) -> bytes:
        """Overwrite (or insert) a huge length somewhere after the api key/version/correlation."""
        at = self.rng.randint(8, max(len(body), 8))
        lie = self.rng.choice(_HUGE_LENGTHS)
        if self.rng.random() < 0.5:
            return body[:at] + lie + body[at + len(lie) :]
        return body[:at] + lie + body[at:]

    def _odd_api(self, body: bytes) -> bytes:
        key = self.rng.choice([-1, 93, 999, 32767, self.rng.choice(self.apis)[0]])
        version = self.rng.choice([-1, 0, 99, 32767])
        return struct.pack(">hh", key, version) + body[4:]

    def _bad_size(self, body: bytes) -> bytes:
        size = self.rng.choice([-1, -(2**31), 0, 2**31 - 1, 200 * 1024 * 1024, len(body) + 1000])
        return struct.pack(">i", size) + body

    @staticmethod
    def describe(frame: bytes) -> Any:
        """(api key, version) of a frame, for failure messages."""
        if len(frame) < 8:
            return None
        return struct.unpack_from(">hh", frame, 4)
