"""A local strom cluster for tests: one ZooKeeper and N broker processes on 127.0.0.2, .3, …

:class:`ClusterProcess` starts a :class:`~strom.testing.zookeeper.ZooKeeperProcess` (Debian's
``zookeeper`` package; or uses an external connect string) and brokers with ids 1..N, broker
``i`` listening on ``127.0.0.{i+1}`` on a free port, each with its own data directory under
``work_dir``. Distinct addresses let :mod:`strom.testing.netfault` cut one broker off
(:meth:`ClusterProcess.isolate`). Every wait has a deadline; every process is stopped by its
PID when the context manager exits, or at interpreter exit if a test forgot::

    with ClusterProcess(tmp_path, brokers=3) as cluster:
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
        leader = cluster.leader_of("orders", 0)
        cluster.kill(leader)                       # kill -9
        cluster.wait_for_leader("orders", 0, not_in={leader})
        cluster.start_broker(leader)               # back on the same data

Faults: :meth:`kill` (SIGKILL), :meth:`stop` (SIGTERM: a controlled shutdown), :meth:`pause` /
:meth:`resume` (SIGSTOP / SIGCONT), :meth:`restart`, :meth:`isolate` (nftables).
Cluster state is read as a client sees it, through confluent-kafka's metadata.
"""

from __future__ import annotations

import atexit
import logging
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from strom.testing.netfault import Endpoint, NetworkFault
from strom.testing.process import BrokerProcess
from strom.testing.zookeeper import ZooKeeperProcess

T = TypeVar("T")
#: ZooKeeper session timeout the brokers of a test cluster get unless told otherwise: short,
#: so a lost broker is noticed quickly, long enough for a loaded 2-core machine.
TEST_SESSION_TIMEOUT_MS = 6000
_live: weakref.WeakSet[ClusterProcess] = weakref.WeakSet()
_CLIENT_LOG = logging.getLogger("strom.testing.cluster.librdkafka")


class ClusterTimeout(AssertionError):
    """A cluster state awaited with a deadline did not come (an assertion for tests)."""


def broker_host(broker_id: int) -> str:
    """Broker ``i`` listens on 127.0.0.(i+1): 127.0.0.1 stays for ZooKeeper and clients."""
    if not 1 <= broker_id <= 253:
        raise ValueError(f"broker id {broker_id} outside 1..253")
    return f"127.0.0.{broker_id + 1}"


def wait_until(
    condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1
) -> T:
    """Poll ``condition`` until it returns a truthy value (returned); ClusterTimeout naming
    ``what`` (and the last exception, if the condition raised) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - a broker may be between states
            last_error = exc
        if time.monotonic() >= deadline:
            suffix = f" (last error: {last_error!r})" if last_error else ""
            raise ClusterTimeout(f"{what}: not within {timeout:g} s{suffix}")
        time.sleep(interval)


class ClusterProcess:
    """ZooKeeper + ``brokers`` broker processes; see the module docstring."""

    def __init__(
        self,
        work_dir: Path,
        brokers: int = 3,
        *,
        zookeeper: str | None = None,
        settings: Mapping[str, str] | None = None,
        broker_settings: Mapping[int, Mapping[str, str]] | None = None,
        racks: Mapping[int, str] | None = None,
        session_timeout_ms: int = TEST_SESSION_TIMEOUT_MS,
        chroot: str = "",
        broker_env: Mapping[int, Mapping[str, str]] | None = None,
        listener_settings: Callable[[int, str, int], Mapping[str, str]] | None = None,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.external_zookeeper = zookeeper
        self.zookeeper: Any = None  # a ZooKeeperProcess when we run one
        self.chroot = chroot
        self.session_timeout_ms = session_timeout_ms
        # a short controlled-shutdown backoff: at close every broker stops at once and the
        # last ones cannot hand their leaderships to anybody (Kafka's 3 x 5 s, 10 s a test)
        self.settings = {"zookeeper.session.timeout.ms": str(session_timeout_ms),
                         "controlled.shutdown.retry.backoff.ms": "1000"}  # fmt: skip
        self.settings.update(settings or {})
        self.broker_settings = {i: dict(s) for i, s in (broker_settings or {}).items()}
        self.racks = dict(racks or {})
        #: environment variables per broker id (on top of this process's)
        self.broker_env = {i: dict(e) for i, e in (broker_env or {}).items()}
        #: (broker id, host, client port) -> more settings for that broker: named listeners
        #: (e.g. a TLS inter-broker listener beside the PLAINTEXT one clients and these
        #: helpers use, on ``port``)
        self.listener_settings = listener_settings
        self.brokers: dict[int, BrokerProcess] = {}
        self._initial = brokers
        self._faults: list[NetworkFault] = []
        self._admin: Any = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def zk_connect(self) -> str:
        """The brokers' ``zookeeper.connect`` (with the chroot, if any)."""
        if self.external_zookeeper is not None:
            base = self.external_zookeeper
        elif self.zookeeper is not None:
            base = str(self.zookeeper.connect_string)
        else:
            raise RuntimeError("the cluster is not started")
        return base + self.chroot

    def start(self, timeout: float = 60.0) -> Self:
        """ZooKeeper, then every broker (in parallel), then wait until clients see them all."""
        _live.add(self)
        try:
            if self.external_zookeeper is None and self.zookeeper is None:
                self.zookeeper = ZooKeeperProcess(self.work_dir / "zookeeper")
                self.zookeeper.start(timeout)
            for broker_id in range(1, self._initial + 1):
                self._make_broker(broker_id)
            self._parallel(lambda b: b.start(timeout), self.brokers.values())
            self.wait_for_brokers(set(self.brokers), timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _make_broker(self, broker_id: int) -> BrokerProcess:
        settings = dict(self.settings)
        if broker_id in self.racks:
            settings["broker.rack"] = self.racks[broker_id]
        settings.update(self.broker_settings.get(broker_id, {}))
        data_dir = self.work_dir / f"broker-{broker_id}" / "data"
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        broker = BrokerProcess(
            data_dir,
            host=broker_host(broker_id),
            broker_id=broker_id,
            zookeeper=self.zk_connect,
            settings=settings,
            log_file=data_dir.parent / "broker.log",
            env=self.broker_env.get(broker_id),
        )
        if self.listener_settings is not None:
            broker.settings.update(self.listener_settings(broker_id, broker.host, broker.port))
        self.brokers[broker_id] = broker
        return broker

    def add_broker(self, timeout: float = 60.0, settings: Mapping[str, str] | None = None) -> int:
        """Start one more broker (the next id) and wait until clients see it; its id."""
        broker_id = max(self.brokers, default=0) + 1
        if settings:
            self.broker_settings[broker_id] = dict(settings)
        self._make_broker(broker_id).start(timeout)
        self.wait_for_brokers(self.running_ids(), timeout)
        return broker_id

    def close(self) -> None:
        """Heal every network fault, stop every broker (SIGTERM, in parallel), then ZooKeeper."""
        self._admin = None  # first: a client kept past its brokers reconnects to them in a loop
        for fault in self._faults:
            fault.close()
        self._faults.clear()
        self._parallel(lambda b: b.stop(), self.brokers.values())
        if self.zookeeper is not None:
            self.zookeeper.stop()
        _live.discard(self)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @staticmethod
    def _parallel(action: Callable[[BrokerProcess], Any], brokers: Iterable[BrokerProcess]) -> None:
        items = list(brokers)
        if not items:
            return
        with ThreadPoolExecutor(len(items)) as pool:
            for future in [pool.submit(action, b) for b in items]:
                future.result()

    # -- faults --------------------------------------------------------------------------

    def broker(self, broker_id: int) -> BrokerProcess:
        try:
            return self.brokers[broker_id]
        except KeyError:
            raise KeyError(f"no broker {broker_id} (brokers: {sorted(self.brokers)})") from None

    def kill(self, broker_id: int) -> None:
        """kill -9 (no controlled shutdown, nothing flushed)."""
        self.broker(broker_id).kill()

    def stop(self, broker_id: int, timeout: float = 30.0) -> int | None:
        """SIGTERM: a controlled shutdown (SIGKILL after ``timeout``); the exit code."""
        return self.broker(broker_id).stop(timeout)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker stops answering anyone, ZooKeeper included."""
        self.broker(broker_id).pause()

    def resume(self, broker_id: int) -> None:
        self.broker(broker_id).resume()

    def start_broker(self, broker_id: int, timeout: float = 60.0) -> None:
        """Start a stopped or killed broker again on its data directory."""
        self.broker(broker_id).start(timeout)

    def restart(self, broker_id: int, *, kill: bool = False, timeout: float = 60.0) -> None:
        """Stop (SIGTERM, or SIGKILL with ``kill``) and start again on the same data."""
        broker = self.broker(broker_id)
        broker.kill() if kill else broker.stop()
        broker.start(timeout)

    def running_ids(self) -> set[int]:
        return {i for i, b in self.brokers.items() if b.pid is not None}

    def isolate(self, broker_id: int, *, from_clients: bool = False) -> NetworkFault:
        """Cut broker ``broker_id`` off from ZooKeeper and from the other brokers (both ways)
        with nftables; ``from_clients`` also from clients (127.0.0.1) reaching its port.
        The returned fault is healed with ``fault.heal()`` (and closed with the cluster).

        Rules match the broker's address against the others' listener ports and vice versa,
        so other tests' processes on the same addresses are not affected. They rely on the
        brokers binding their outgoing connections (to brokers and ZooKeeper) to their own
        listener address."""
        me = self.broker(broker_id)
        fault = NetworkFault().start()
        self._faults.append(fault)
        for other_id, other in self.brokers.items():
            if other_id == broker_id:
                continue
            fault.drop(Endpoint(me.host), Endpoint(other.host, other.port))
            fault.drop(Endpoint(other.host), Endpoint(me.host, me.port))
        zk_host, _, zk_port = self.zk_connect.split("/", 1)[0].split(",")[0].rpartition(":")
        fault.drop(Endpoint(me.host), Endpoint(zk_host, int(zk_port)))
        if from_clients:
            fault.drop(Endpoint("127.0.0.1"), Endpoint(me.host, me.port))
        return fault

    # -- what clients see ----------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every broker's address, comma-separated (clients find the live ones)."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    def admin(self, **conf: Any) -> Any:
        """A confluent-kafka AdminClient bootstrapped with every broker (librdkafka's own log
        lines go to :mod:`logging`, not stderr). Keep it while its futures are pending."""
        from confluent_kafka.admin import AdminClient

        settings: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": _CLIENT_LOG}
        return AdminClient({**settings, **conf})

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = -1,
        config: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        """CreateTopics through any broker; returns once the topic has a leader everywhere."""
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        new = NewTopic(name, partitions, replication_factor, config=dict(config or {}))
        admin.create_topics([new], request_timeout=timeout)[name].result(timeout)
        for p in range(partitions):
            self.wait_for_leader(name, p, timeout=timeout)

    def metadata(self, topic: str | None = None, timeout: float = 5.0) -> Any:
        """A fresh Metadata answer (confluent-kafka's ClusterMetadata) from a live broker."""
        if self._admin is None:
            self._admin = self.admin()
        if topic is None:
            return self._admin.list_topics(timeout=timeout)
        return self._admin.list_topics(topic, timeout=timeout)

    def wait_for_brokers(self, ids: set[int], timeout: float = 30.0) -> None:
        """Until Metadata lists exactly the brokers ``ids``."""
        wait_until(lambda: set(self.metadata().brokers) == ids, timeout,
                   f"brokers {sorted(ids)} in metadata")  # fmt: skip

    def partition_state(self, topic: str, partition: int) -> Any:
        """confluent-kafka's PartitionMetadata (``leader``, ``replicas``, ``isrs``) or None."""
        md = self.metadata(topic).topics.get(topic)
        if md is None or md.error is not None:
            return None
        return md.partitions.get(partition)

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 30.0) -> int:
        """The partition's leader id as Metadata reports it (waits while there is none)."""
        return self.wait_for_leader(topic, partition, timeout=timeout)

    def wait_for_leader(
        self,
        topic: str,
        partition: int = 0,
        *,
        not_in: Iterable[int] = (),
        timeout: float = 30.0,
    ) -> int:
        """Until the partition has a leader outside ``not_in``; its id."""
        excluded = set(not_in)

        def leader() -> int | None:
            state = self.partition_state(topic, partition)
            if state is None or state.leader < 0 or state.leader in excluded:
                return None
            return int(state.leader)

        return wait_until(leader, timeout, f"a leader of {topic}-{partition} not in {excluded}")

    def wait_for_isr(
        self, topic: str, partition: int, isr: set[int], timeout: float = 30.0
    ) -> None:
        """Until the partition's ISR is exactly ``isr``."""
        wait_until(
            lambda: (s := self.partition_state(topic, partition)) is not None
            and set(s.isrs) == isr,
            timeout,
            f"ISR of {topic}-{partition} == {sorted(isr)}",
        )

    def controller_id(self, timeout: float = 10.0) -> int:
        """The controller (DescribeCluster), waiting while there is none."""

        admin = self.admin()

        def controller() -> int | None:
            desc = admin.describe_cluster(request_timeout=5).result(timeout=10)
            return None if desc.controller is None or desc.controller.id < 0 else desc.controller.id

        return wait_until(controller, timeout, "a controller")


@atexit.register
def _close_all() -> None:
    for cluster in list(_live):
        cluster.close()
