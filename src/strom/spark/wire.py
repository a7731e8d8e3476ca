"""Executor side: the Kafka requests that read one partition's raw record batches.

The source reads record batches, not messages (issue 20): librdkafka hands its caller one
``Message`` object per record, which is the per-record Python work the native record codec
removes. So an executor speaks the Kafka protocol itself, through strom's codec
(:mod:`strom.protocol.messages`, ``kio``), for exactly three requests:

* Metadata v8 (to any bootstrap server): the partition's leader and its address;
* Fetch v11 (to the leader, no fetch session, ``replica_id`` -1): the batches from an offset, as
  the bytes the broker stored, with the high watermark, the last stable offset, the log start
  offset and, under read_committed, the aborted transactions;
* ListOffsets v4 earliest (to the leader): where the log starts now (retention).

One blocking connection at a time (:class:`strom.admin.wire.WireConnection`, the client side's
one connection over strom's codec); no retries here: :mod:`strom.spark.fetcher` decides what
an error code means. Every listener kind (``kafka.security.protocol``, ``kafka.ssl.*``,
``kafka.sasl.*`` in librdkafka's or the Java client's names,
:mod:`strom.admin.client_security`): TLS, and SASL with PLAIN or SCRAM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from strom.admin.client_security import WireSecurity
from strom.admin.errors import AdminError
from strom.admin.wire import WireConnection, part
from strom.protocol.errors import ErrorCode

FETCH, LIST_OFFSETS, METADATA = 1, 2, 3
FETCH_VERSION, LIST_OFFSETS_VERSION, METADATA_VERSION = 11, 4, 8
EARLIEST_TIMESTAMP = -2


class WireError(ConnectionError):
    """The broker could not be reached, closed the connection, or answered out of order."""


class PartitionError(Exception):
    """The broker answered a request about the partition with an error code."""

    def __init__(self, code: ErrorCode, what: str) -> None:
        super().__init__(f"{what}: {code.name.upper()}")
        self.code = code


class FetchedPartition(NamedTuple):
    """One partition of a Fetch response (the fields the reader uses)."""

    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[tuple[int, int]]  # (producer id, first offset), read_committed only
    records: bytes


def wire_security(client: Mapping[str, str]) -> WireSecurity:
    """How the executors' connections are secured (TLS and SASL PLAIN / SCRAM, as
    :class:`~strom.admin.client_security.WireSecurity` does); ValueError (one line) for what
    they cannot honour."""
    try:
        return WireSecurity.from_properties(client)
    except AdminError as exc:
        raise ValueError(f"kafka.{exc.message}") from None


class Connection:
    """A :class:`WireConnection` whose failures are :class:`WireError` (the reader retries
    them against a leader looked up again)."""

    def __init__(self, address: str, timeout: float, client_id: str,
                 security: WireSecurity) -> None:
        self.address = address
        try:
            self.wire = WireConnection(address, timeout=timeout, client_id=client_id,
                                       security=security)
        except (OSError, ValueError) as exc:
            raise WireError(f"cannot connect to {address}: {exc}") from None

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        """Send a request and wait for its answer."""
        return self.receive(api_key, version, self.send(api_key, version, **fields))

    def send(self, api_key: int, version: int, **fields: Any) -> int:
        """Send a request without waiting for its answer (its correlation id, for
        :meth:`receive`)."""
        try:
            return self.wire.send(api_key, version, **fields)
        except (OSError, ConnectionError) as exc:
            raise WireError(f"request to {self.address} failed: {exc}") from None

    def receive(self, api_key: int, version: int, correlation: int) -> Any:
        """The answer to the request sent as ``correlation`` (answers come in sending order)."""
        try:
            return self.wire.receive(api_key, version, correlation)
        except (OSError, ConnectionError) as exc:
            raise WireError(f"request to {self.address} failed: {exc}") from None

    def close(self) -> None:
        self.wire.close()


def any_server(bootstrap: list[str], timeout: float, client_id: str,
               security: WireSecurity) -> Connection:  # fmt: skip
    """A connection to the first of the ``bootstrap`` addresses that answers (WireError naming
    every failure when none does)."""
    errors = []
    for address in bootstrap:
        try:
            return Connection(address.strip(), timeout, client_id, security)
        except WireError as exc:
            errors.append(str(exc))
    raise WireError("; ".join(errors) or "no bootstrap servers")


def topic_metadata(conn: Connection, topic: str, *, auto_create: bool) -> Any:
    """One Metadata request for ``topic``: the brokers, its partitions and their leaders
    (``auto_create``: as a producer asks, letting the broker create the topic)."""
    return conn.request(
        METADATA, METADATA_VERSION,
        topics=(part(METADATA, METADATA_VERSION, "MetadataRequestTopic", name=topic),),
        allow_auto_topic_creation=auto_create, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )  # fmt: skip


class PartitionClient:
    """The requests about one partition, sent to its leader (found through Metadata)."""

    def __init__(self, client: Mapping[str, str], topic: str, partition: int,
                 timeout: float) -> None:  # fmt: skip
        self.security = wire_security(client)
        self.bootstrap = [a for a in client["bootstrap.servers"].split(",") if a.strip()]
        self.client_id = client.get("client.id", "strom-spark-source")
        self.topic = topic
        self.partition = partition
        self.timeout = timeout
        self._leader: Connection | None = None

    def close(self) -> None:
        if self._leader is not None:
            self._leader.close()
            self._leader = None

    def reset(self) -> None:
        """Forget the leader: the next request looks it up again (after a leadership change or
        a broken connection)."""
        self.close()

    def leader(self) -> Connection:
        """The connection to the partition's leader (looked up once, kept until reset)."""
        if self._leader is not None:
            return self._leader
        conn = any_server(self.bootstrap, self.timeout, self.client_id, self.security)
        try:
            response = topic_metadata(conn, self.topic, auto_create=False)
        finally:
            conn.close()
        brokers = {int(b.node_id): f"{b.host}:{int(b.port)}" for b in response.brokers}
        for topic in response.topics:
            if str(topic.name) != self.topic:
                continue
            if topic.error_code != ErrorCode.none:
                raise PartitionError(ErrorCode(topic.error_code), f"metadata of {self.topic}")
            for p in topic.partitions:
                if int(p.partition_index) != self.partition:
                    continue
                if p.error_code != ErrorCode.none:
                    raise PartitionError(ErrorCode(p.error_code),
                                         f"metadata of {self.topic}-{self.partition}")  # fmt: skip
                address = brokers.get(int(p.leader_id))
                if address is None:
                    raise PartitionError(ErrorCode.leader_not_available,
                                         f"leader of {self.topic}-{self.partition}")  # fmt: skip
                self._leader = Connection(address, self.timeout, self.client_id, self.security)
                return self._leader
        raise PartitionError(ErrorCode.unknown_topic_or_partition,
                             f"metadata of {self.topic}-{self.partition}")  # fmt: skip

    def fetch(self, offset: int, *, max_wait_ms: int, max_bytes: int,
              read_committed: bool) -> FetchedPartition:  # fmt: skip
        """One Fetch of the partition from ``offset``."""
        fetch_partition = part(FETCH, FETCH_VERSION, "FetchPartition", partition=self.partition,
                               current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                               partition_max_bytes=max_bytes)  # fmt: skip
        topic = part(FETCH, FETCH_VERSION, "FetchTopic", topic=self.topic,
                     partitions=(fetch_partition,))  # fmt: skip
        response = self.leader().request(
            FETCH, FETCH_VERSION, replica_id=-1, max_wait=max_wait_ms, min_bytes=1,
            max_bytes=max_bytes, isolation_level=int(read_committed), session_id=0,
            session_epoch=-1, topics=(topic,), forgotten_topics_data=(), rack_id="",
        )  # fmt: skip
        if response.error_code != ErrorCode.none:
            return FetchedPartition(ErrorCode(response.error_code), -1, -1, -1, [], b"")
        for topic in response.responses:
            for p in topic.partitions:
                if str(topic.topic) == self.topic and int(p.partition_index) == self.partition:
                    aborted = [(int(a.producer_id), int(a.first_offset))
                               for a in p.aborted_transactions or ()]  # fmt: skip
                    return FetchedPartition(ErrorCode(p.error_code), int(p.high_watermark),
                                            int(p.last_stable_offset), int(p.log_start_offset),
                                            aborted, p.records or b"")  # fmt: skip
        raise WireError(f"the Fetch response has no {self.topic}-{self.partition}")

    def log_start(self) -> int:
        """The partition's log start offset now (ListOffsets earliest)."""
        wanted = part(LIST_OFFSETS, LIST_OFFSETS_VERSION, "ListOffsetsPartition",
                      partition_index=self.partition, current_leader_epoch=-1,
                      timestamp=EARLIEST_TIMESTAMP)  # fmt: skip
        topic = part(LIST_OFFSETS, LIST_OFFSETS_VERSION, "ListOffsetsTopic", name=self.topic,
                     partitions=(wanted,))  # fmt: skip
        response = self.leader().request(LIST_OFFSETS, LIST_OFFSETS_VERSION, replica_id=-1,
                                         isolation_level=0, topics=(topic,))  # fmt: skip
        for topic in response.topics:
            for p in topic.partitions:
                if int(p.partition_index) == self.partition:
                    if p.error_code != ErrorCode.none:
                        raise PartitionError(ErrorCode(p.error_code),
                                             f"log start of {self.topic}-{self.partition}")
                    return int(p.offset)
        raise WireError(f"the ListOffsets response has no {self.topic}-{self.partition}")
