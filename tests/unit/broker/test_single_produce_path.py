"""One-partition Produce requests (read without kio by the connection core) answered inline
in ``data_received`` or by the connection's task, interleaved with requests of the generic
path: every response in request order with the right offsets and error codes, every record
stored once in order, a corrupt batch refused with CORRUPT_MESSAGE."""

from __future__ import annotations

import asyncio
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import kio.schema.api_versions.v3.request as av
import pytest

from strom.broker.assembly import Broker
from strom.broker.server import KafkaConnection
from strom.config import BrokerConfig
from strom.protocol import record_batch as rb
from strom.protocol.messages import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_class,
    request_module,
)
from strom.protocol.records import build_batch, decode_records
from strom.testing import free_port


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.closing = False

    def write(self, data: Any) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def frames(self) -> list[bytes]:
        out, pos = [], 0
        while pos < len(self.data):
            (size,) = struct.unpack_from(">i", self.data, pos)
            out.append(bytes(self.data[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        return out


def produce(version: int, corr: int, parts: list[tuple[str, int, bytes]], acks: int = 1) -> bytes:
    mod = request_module(0, version)
    topics: dict[str, list[tuple[int, bytes]]] = {}
    for topic, index, records in parts:
        topics.setdefault(topic, []).append((index, records))
    request = build(
        request_class(0, version), transactional_id=None, acks=acks, timeout=5000,
        topic_data=tuple(build(mod.TopicProduceData, name=name, partition_data=tuple(
            build(mod.PartitionProduceData, index=i, records=r) for i, r in ps))
            for name, ps in topics.items()),
    )  # fmt: skip
    return encode_request(RequestHeader(0, version, corr, "test"), request)


def batch(value: bytes) -> bytes:
    return build_batch([(None, value, [], 1_700_000_000_000)])


def api_versions(corr: int) -> bytes:
    request = build(av.ApiVersionsRequest, client_software_name="t",
                    client_software_version="1")  # fmt: skip
    return encode_request(RequestHeader(18, 3, corr, "test"), request)


@pytest.fixture
def tmp() -> Any:
    path = Path(tempfile.mkdtemp(prefix="strom-single-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def _with_broker(tmp: Path, body: Any) -> Any:
    # no admin listener: its default port may be taken by another broker on the machine
    broker = Broker(BrokerConfig({"log.cleaner.enable": "false", "strom.admin.listener": ""}),
                    tmp / "data", ("127.0.0.1", free_port()))  # fmt: skip
    await broker.start()
    try:
        assert broker.services is not None
        await broker.services.topics.create("plain", 2, 1, {})
        await broker.services.topics.create("synced", 1, 1, {"flush.messages": "1"})  # waits
        conn = KafkaConnection(broker.services, broker.connections)
        transport = RecordingTransport()
        conn.connection_made(transport)
        await asyncio.sleep(0)  # the connection's task starts and waits for frames
        try:
            return await body(broker, conn, transport)
        finally:
            transport.close()
            conn.connection_lost(None)
    finally:
        await broker.stop()


async def _settle(conn: KafkaConnection, transport: RecordingTransport, count: int) -> None:
    for _ in range(2000):
        if len(transport.frames()) >= count and not conn.queue and not conn.out:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{len(transport.frames())} responses, expected {count}")


def _values(broker: Broker, topic: str, index: int) -> list[bytes]:
    assert broker.services is not None
    log_ = broker.services.replicas.get_log(topic, index)
    data = log_.read(0, 1 << 20).records
    out = []
    for _header, view in rb.iter_batches(data):
        out.extend(r.value for r in decode_records(view))
    return out


@pytest.mark.parametrize("version", [3, 7, 9, 12])
def test_pipelined_mixture_answered_in_order(tmp: Path, version: int) -> None:
    async def body(broker: Broker, conn: KafkaConnection, transport: RecordingTransport) -> None:
        requests = [
            produce(version, 1, [("plain", 0, batch(b"a"))]),  # inline
            produce(version, 2, [("synced", 0, batch(b"b"))]),  # inline, then waits: Pending
            produce(version, 3, [("plain", 0, batch(b"c"))]),  # behind the Pending: the task
            api_versions(4),  # the generic path
            produce(version, 5, [("plain", 0, batch(b"d")), ("plain", 1, batch(b"e"))]),  # generic
            produce(version, 6, [("nope", 0, batch(b"x"))]),  # unknown topic: an error
            produce(version, 7, [("plain", 1, batch(b"f"))]),
        ]
        conn.data_received(b"".join(requests[:3]))
        # answered before anything awaited: inline; the fsync-bound one waits in the queue
        assert [struct.unpack_from(">i", f)[0] for f in transport.frames()] == [1]
        assert [type(q).__name__ for q in conn.queue] == ["Pending", "bytes"]
        conn.data_received(b"".join(requests[3:5]))
        await _settle(conn, transport, 5)
        conn.data_received(requests[5])  # the task is idle again: inline
        conn.data_received(requests[6])
        await _settle(conn, transport, 7)
        frames = transport.frames()
        assert [struct.unpack_from(">i", f)[0] for f in frames] == [1, 2, 3, 4, 5, 6, 7]
        got = {}
        for f in frames:
            corr = struct.unpack_from(">i", f)[0]
            if corr == 4:
                continue
            _, response = decode_response(0, version, f)
            got[corr] = [(t.name, p.index, int(p.error_code), p.base_offset)
                         for t in response.responses for p in t.partition_responses]  # fmt: skip
        assert got == {
            1: [("plain", 0, 0, 0)], 2: [("synced", 0, 0, 0)], 3: [("plain", 0, 0, 1)],
            5: [("plain", 0, 0, 2), ("plain", 1, 0, 0)], 6: [("nope", 0, 3, -1)],
            7: [("plain", 1, 0, 1)],
        }  # fmt: skip
        assert _values(broker, "plain", 0) == [b"a", b"c", b"d"]
        assert _values(broker, "plain", 1) == [b"e", b"f"]
        assert _values(broker, "synced", 0) == [b"b"]
        assert not transport.closing

    asyncio.run(_with_broker(tmp, body))


def test_corrupt_batch_is_answered_as_the_generic_path_answers_it(tmp: Path) -> None:
    async def body(broker: Broker, conn: KafkaConnection, transport: RecordingTransport) -> None:
        bad = bytearray(batch(b"z"))
        bad[-1] ^= 0xFF  # the CRC no longer matches
        conn.data_received(produce(9, 1, [("plain", 0, bytes(bad))]))
        conn.data_received(produce(9, 2, [("plain", 0, batch(b"ok"))], acks=0))
        await _settle(conn, transport, 1)
        (only,) = transport.frames()
        _, response = decode_response(0, 9, only)
        (p,) = response.responses[0].partition_responses
        assert (int(p.error_code), p.base_offset) == (2, -1)  # CORRUPT_MESSAGE
        assert not transport.closing
        # a refused acks=0 batch gets no answer: as Kafka does, the connection is closed, so
        # the producer learns of the failure
        conn.data_received(produce(9, 3, [("plain", 0, bytes(bad))], acks=0))
        for _ in range(100):
            if transport.closing:
                break
            await asyncio.sleep(0.01)
        assert transport.closing
        assert [struct.unpack_from(">i", f)[0] for f in transport.frames()] == [1]
        assert _values(broker, "plain", 0) == [b"ok"]

    asyncio.run(_with_broker(tmp, body))


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_round_robin_over_partitions_costs_one_layout_and_one_template(tmp: Path,
                                                                       version: int) -> None:
    """A producer writing one message to each partition in turn (librdkafka sends one request
    per partition): every request is answered by the fast path with its own partition's index
    and offset, and the connection reads the request layout once and keeps one response
    template for the topic, however many partitions it meets (issue 29: at 10,000 partitions
    both were rebuilt per request)."""

    async def body(broker: Broker, conn: KafkaConnection, transport: RecordingTransport) -> None:
        assert broker.services is not None
        await broker.services.topics.create("wide", 300, 1, {})
        requests = [produce(version, i, [("wide", i % 300, batch(b"v%d" % i))])
                    for i in range(900)]  # fmt: skip
        for i in range(0, 900, 3):  # a few frames per read, as they arrive
            conn.data_received(b"".join(requests[i : i + 3]))
        await _settle(conn, transport, 900)
        frames = transport.frames()
        got = []
        for f in frames:
            corr, response = decode_response(0, version, f)
            ((name, p),) = [(t.name, p) for t in response.responses
                            for p in t.partition_responses]  # fmt: skip
            got.append((corr, name, p.index, int(p.error_code), p.base_offset))
        assert got == [(i, "wide", i % 300, 0, i // 300) for i in range(900)]
        assert _values(broker, "wide", 7) == [b"v7", b"v307", b"v607"]
        assert conn.core.produce.parses == 1  # the layout read once
        assert len(conn.core.templates) == 1  # one template for the topic

    asyncio.run(_with_broker(tmp, body))
