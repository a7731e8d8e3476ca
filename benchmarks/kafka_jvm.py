"""Apache Kafka's own JVM programs, from Maven Central, as strom's yardstick and test partners.

Nothing is downloaded outside the registries: ``benchmarks/kafka/pom.xml`` lists the jars
(``kafka_2.13`` with Connect's runtime, FileStream connectors and MirrorMaker 2; Spark's own
Kafka source in a profile of its own) and Maven resolves them into the local Maven cache
(``~/.m2``). :func:`maven_classpath` asks Maven once for the resolved jar list and keeps it in
``benchmarks/kafka/target/<profile>.classpath`` (rebuilt when the pom is newer); a file lock
keeps parallel pytest workers from resolving at once.

* :class:`KafkaNode`: one Kafka 4 process in KRaft mode, combined roles (broker and controller,
  as Kafka's own ``config/server.properties``), bound to 127.0.0.1 on free ports. Its log
  directory is formatted with ``kafka.tools.StorageTool format`` (what ``kafka-storage.sh
  format`` runs) before its first start; stopped by its PID. A single node is its own quorum.
* :class:`KafkaCluster`: three (or N) such nodes, each a voter of one static KRaft quorum; the
  client-side views (``create_topic``, ``leader_of``, ``wait_for_isr`` ...) and the faults
  (``kill``, ``stop``, ``start_broker``) of :class:`strom.testing.cluster.ClusterProcess`, so a
  benchmark written for a strom cluster runs on Kafka's unchanged.
* :class:`ConnectDistributedProcess`: Kafka Connect's own distributed worker
  (``org.apache.kafka.connect.cli.ConnectDistributed``) against any Kafka-protocol broker.
* :class:`MirrorMakerProcess`: MirrorMaker 2 in dedicated mode
  (``org.apache.kafka.connect.mirror.MirrorMaker``).
* :func:`spark_kafka_jars`: the jars that ``spark.jars`` needs for Spark's ``format("kafka")``.

JVM settings: the broker gets ``kafka-server-start.sh``'s defaults (``-Xms1g -Xmx1g``, G1 with a
20 ms pause goal: :data:`KAFKA_JVM_FLAGS`); Connect and MirrorMaker 512 MiB of heap. Log lines
(log4j2, INFO as Kafka's shipped ``log4j2.yaml``) go to each process's log file.
"""

from __future__ import annotations

import base64
import fcntl
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Self

from strom.testing.cluster import ClusterProcess
from strom.testing.process import ChildProcess, free_port

HERE = Path(__file__).resolve().parent
POM = HERE / "kafka" / "pom.xml"
TARGET = HERE / "kafka" / "target"

#: ``kafka-server-start.sh`` (heap) and ``kafka-run-class.sh`` (the rest): what a user who
#: starts Kafka from its distribution gets.
KAFKA_JVM_FLAGS = (
    "-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
)  # fmt: skip
#: Connect workers and MirrorMaker in tests: a bounded heap on a shared 2-core machine.
TOOL_JVM_FLAGS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d{HH:mm:ss,SSS}] %p %m (%c{1})%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
logger.zk.name = org.apache.zookeeper
logger.zk.level = warn
logger.reflections.name = org.reflections
logger.reflections.level = error
"""


class MavenUnavailable(RuntimeError):
    """java or mvn missing, or Maven could not resolve the jars (the message says which)."""


def jvm_tools_missing() -> str | None:
    """Why the JVM programs cannot run here (None: java and mvn are on PATH)."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not on PATH (Debian: default-jdk-headless maven)"
    return None


def maven_classpath(profile: str = "kafka", properties: Mapping[str, str] | None = None, *,
                    timeout: float = 1200.0) -> list[str]:  # fmt: skip
    """The jars of ``profile`` in :data:`POM`, resolved by Maven (cached, see the module doc);
    :class:`MavenUnavailable` when Maven has not finished within ``timeout`` seconds."""
    reason = jvm_tools_missing()
    if reason:
        raise MavenUnavailable(reason)
    props = dict(properties or {})
    tag = profile + "".join(f"-{v}" for _, v in sorted(props.items()))
    TARGET.mkdir(parents=True, exist_ok=True)
    listing = TARGET / f"{tag}.classpath"
    missing = TARGET / f"{tag}.missing"  # Maven could not resolve it: not asked again for a day
    with open(TARGET / ".resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if missing.exists() and missing.stat().st_mtime > max(POM.stat().st_mtime,
                                                              time.time() - 86400):  # fmt: skip
            raise MavenUnavailable(missing.read_text())
        if not listing.exists() or listing.stat().st_mtime < POM.stat().st_mtime:
            others = {"kafka": "spark-kafka", "spark-kafka": "kafka"}
            active = f"{profile},!{others[profile]}" if profile in others else profile
            try:
                done = subprocess.run(
                    ["mvn", "-B", "-q", "-f", str(POM), "-P", active, "dependency:build-classpath",
                     f"-Dmdep.outputFile={listing}", *(f"-D{k}={v}" for k, v in props.items())],
                    capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                )  # fmt: skip
            except subprocess.TimeoutExpired as exc:  # a slow mirror: tried again next time
                listing.unlink(missing_ok=True)
                raise MavenUnavailable(f"mvn did not resolve profile {profile} {props or ''} of "
                                       f"{POM} within {timeout:g} s") from exc  # fmt: skip
            if done.returncode != 0 or not listing.exists():
                listing.unlink(missing_ok=True)
                why = (f"mvn could not resolve profile {profile} {props or ''} of {POM}:\n"
                       f"{done.stdout[-3000:]}{done.stderr[-1500:]}")  # fmt: skip
                if "Could not resolve dependencies" in done.stdout + done.stderr:
                    missing.write_text(why)  # not there (a network failure is tried again)
                raise MavenUnavailable(why)
    jars = [j for j in listing.read_text().strip().split(os.pathsep) if j]
    absent = [j for j in jars if not Path(j).is_file()]
    if absent:  # the Maven cache was cleaned since: resolve again
        listing.unlink()
        return maven_classpath(profile, properties, timeout=timeout)
    return jars


@cache
def kafka_classpath() -> str:
    return os.pathsep.join(maven_classpath("kafka"))


def kafka_version() -> str | None:
    """The version of the ``kafka_2.13`` jar on the resolved classpath."""
    for jar in kafka_classpath().split(os.pathsep):
        name = Path(jar).name
        if name.startswith("kafka_2.13-") and name.endswith(".jar"):
            return name[len("kafka_2.13-") : -len(".jar")]
    return None


#: the spark-sql-kafka-0-10 release used when Maven Central has none for the installed PySpark
#: (PySpark 4.3.0 is on PyPI, Spark 4.3.0's jars are not on Maven Central): the newest release
#: before it, checked to work with PySpark 4.3.0 by tests/spark/test_kafka_format.py.
SPARK_KAFKA_FALLBACK = "4.2.0"


def spark_kafka_jars(spark_version: str | None = None, *, timeout: float = 240.0) -> list[str]:
    """Jars for ``spark.jars`` so that Spark's own ``format("kafka")`` loads: the connector,
    its token provider, kafka-clients and commons-pool2, without the jars PySpark already
    ships (Scala, Hadoop, slf4j ..., of the versions Spark was built with).

    On a clean machine Maven downloads about 30 MB (the dependency plugin and these four jars:
    about 15 s); each resolution is bounded by ``timeout`` seconds (the tests' fixture must not
    hang on a slow mirror: :class:`MavenUnavailable` then)."""
    import pyspark  # noqa: PLC0415

    version = spark_version or pyspark.__version__
    try:
        jars = maven_classpath("spark-kafka", {"spark.version": version}, timeout=timeout)
    except MavenUnavailable:
        if spark_version is not None or version == SPARK_KAFKA_FALLBACK:
            raise
        jars = maven_classpath("spark-kafka", {"spark.version": SPARK_KAFKA_FALLBACK},
                               timeout=timeout)  # fmt: skip
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in jars if _artifact(Path(j).name) not in shipped]


def _artifact(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients`` (the name up to its version)."""
    stem = jar_name.removesuffix(".jar")
    parts = stem.split("-")
    for i, part in enumerate(parts):
        if i and part[:1].isdigit():
            return "-".join(parts[:i])
    return stem


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def write_properties(path: Path, settings: Mapping[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))


def _log4j_file(directory: Path, level: str) -> Path:
    path = directory / f"log4j2-{level.lower()}.properties"
    if not path.exists():
        path.write_text(LOG4J2.replace("{level}", level))
    return path


class JvmProcess(ChildProcess):
    """A JVM child process running ``main_class`` on the Kafka classpath (see ChildProcess:
    log file, start waits for ``port``, stop by PID)."""

    main_class = ""
    jvm_flags: Sequence[str] = TOOL_JVM_FLAGS
    log_level = "INFO"
    work_dir: Path

    def arguments(self) -> list[str]:
        raise NotImplementedError

    def command(self) -> list[str]:
        log4j = _log4j_file(self.work_dir, self.log_level)
        return ["java", *self.jvm_flags, f"-Dlog4j2.configurationFile={log4j}",
                "-cp", kafka_classpath(), self.main_class, *self.arguments()]  # fmt: skip


class KafkaNode(JvmProcess):
    """One Kafka 4 node in KRaft mode (broker and controller in one process).

    ``voters`` is the static quorum (``{node_id: controller_port}``); None makes this node a
    quorum of its own (a single-node Kafka). ``settings`` are extra ``server.properties``
    lines. The log directory survives :meth:`stop` / :meth:`kill`, so :meth:`start` again is
    a restart on the same data; it is formatted once, before the first start."""

    name = "kafka"
    main_class = "kafka.Kafka"
    jvm_flags = KAFKA_JVM_FLAGS

    def __init__(self, work_dir: Path, *, node_id: int = 1, cluster_id: str | None = None,
                 port: int | None = None, controller_port: int | None = None,
                 voters: Mapping[int, int] | None = None,
                 settings: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self.work_dir = Path(work_dir)
        self.node_id = node_id
        self.cluster_id = cluster_id or new_cluster_id()
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.voters = dict(voters) if voters is not None else {node_id: self.controller_port}
        self.settings = dict(settings or {})
        self.log_dir = self.work_dir / "data"
        self.config_file = self.work_dir / "server.properties"
        self.log_file = self.work_dir / "kafka.log"
        self._proc = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def server_properties(self) -> dict[str, str]:
        single = len(self.voters) == 1
        rf = "1" if single else str(min(3, len(self.voters)))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": ",".join(f"{i}@{self.host}:{p}"
                                                 for i, p in sorted(self.voters.items())),
            "listeners": f"PLAINTEXT://{self.host}:{self.port},"
                         f"CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            # config/server.properties of Kafka's distribution, for one node or three
            "num.partitions": "1",
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": "1" if single else "2",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": "1" if single else "2",
        }  # fmt: skip
        props.update(self.settings)
        return props

    def prepare(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        write_properties(self.config_file, self.server_properties())
        if (self.log_dir / "meta.properties").exists():
            return
        log4j = _log4j_file(self.work_dir, "WARN")
        done = subprocess.run(
            ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}",
             "-cp", kafka_classpath(), "kafka.tools.StorageTool", "format",
             "-t", self.cluster_id, "-c", str(self.config_file)],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{done.stdout}{done.stderr}")

    def arguments(self) -> list[str]:
        return [str(self.config_file)]

    def start(self, timeout: float = 60.0) -> Self:
        """Start and wait until the listener answers Metadata naming this node."""
        deadline = time.monotonic() + timeout
        super().start(timeout)
        wait_metadata(self.bootstrap, max(1.0, deadline - time.monotonic()), {self.node_id})
        return self


def wait_metadata(bootstrap: str, timeout: float, brokers: set[int] | None = None) -> None:
    """Until a Metadata answer from ``bootstrap`` lists ``brokers`` (or any broker)."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _QUIET})  # type: ignore[dict-item]
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
            if md.brokers and (brokers is None or brokers <= set(md.brokers)):
                return
        except Exception as exc:  # noqa: BLE001 - not serving yet
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"{bootstrap}: no Metadata naming {brokers or 'a broker'} within "
                       f"{timeout:g} s (last error: {last!r})")  # fmt: skip


class _Quiet:
    def log(self, *_args: object, **_kwargs: object) -> None:
        pass


_QUIET = _Quiet()


class KafkaCluster(ClusterProcess):
    """``brokers`` Kafka nodes (ids 1..N, every one a KRaft voter) on 127.0.0.1.

    Reuses :class:`~strom.testing.cluster.ClusterProcess`'s client-side views and faults,
    which only need ``self.brokers`` (id -> a process with ``bootstrap``, ``pid``, ``start``,
    ``stop``, ``kill``); ZooKeeper and network isolation do not apply."""

    def __init__(self, work_dir: Path, brokers: int = 3, *,
                 settings: Mapping[str, str] | None = None) -> None:  # fmt: skip
        super().__init__(work_dir, brokers)
        self.kafka_settings = dict(settings or {})
        self.cluster_id = new_cluster_id()

    def start(self, timeout: float = 120.0) -> Self:
        try:
            controller_ports = {i: free_port() for i in range(1, self._initial + 1)}
            for i in controller_ports:
                self.brokers[i] = KafkaNode(  # type: ignore[assignment]
                    self.work_dir / f"kafka-{i}", node_id=i, cluster_id=self.cluster_id,
                    controller_port=controller_ports[i], voters=controller_ports,
                    settings=self.kafka_settings)  # fmt: skip
            # in parallel: a node's broker waits for the quorum, which needs a majority up
            self._parallel(lambda b: b.prepare(), self.brokers.values())
            self._parallel(lambda b: ChildProcess.start(b, timeout), self.brokers.values())
            self.wait_for_brokers(set(self.brokers), timeout)
        except BaseException:
            self.close()
            raise
        return self

    def start_broker(self, broker_id: int, timeout: float = 60.0) -> None:
        self.broker(broker_id).start(timeout)

    def isolate(self, broker_id: int, *, from_clients: bool = False) -> Any:
        raise NotImplementedError("KafkaCluster has no network faults")


class ConnectDistributedProcess(JvmProcess):
    """Kafka Connect's distributed worker (the JVM one) against ``bootstrap``; REST on a free
    127.0.0.1 port. Connectors on the classpath (FileStream, MirrorMaker's) need no
    ``plugin.path``. :meth:`request` talks REST: ``(status, parsed JSON body or None)``."""

    name = "kafka connect worker"
    main_class = "org.apache.kafka.connect.cli.ConnectDistributed"

    def __init__(self, work_dir: Path, bootstrap: str, *, group_id: str = "connect-jvm",
                 settings: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self.work_dir = Path(work_dir)
        self.port = free_port()
        self.log_file = self.work_dir / f"connect-{self.port}.log"
        self.config_file = self.work_dir / f"connect-{self.port}.properties"
        self.settings = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "listeners": f"http://127.0.0.1:{self.port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port),
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{group_id}-configs",
            "offset.storage.topic": f"{group_id}-offsets",
            "status.storage.topic": f"{group_id}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.flush.interval.ms": "1000",
            "scheduled.rebalance.max.delay.ms": "5000",
            **(settings or {}),
        }
        self._proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def prepare(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        write_properties(self.config_file, self.settings)

    def arguments(self) -> list[str]:
        return [str(self.config_file)]

    def start(self, timeout: float = 120.0) -> Self:
        """Start and wait until ``GET /connectors`` answers (the worker joined its group)."""
        deadline = time.monotonic() + timeout
        super().start(timeout)
        while time.monotonic() < deadline:
            try:
                status, _ = self.request("GET", "/connectors")
                if status == 200:
                    return self
            except OSError:
                pass
            if self._proc is not None and self._proc.poll() is not None:
                break
            time.sleep(0.2)
        tail = self.log_tail()
        self.kill()
        raise RuntimeError(f"the Connect worker's REST API did not answer:\n{tail}")

    def request(self, method: str, path: str, body: Any = None,
                timeout: float = 30.0) -> tuple[int, Any]:  # fmt: skip
        import json  # noqa: PLC0415
        import urllib.error  # noqa: PLC0415
        import urllib.request  # noqa: PLC0415

        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw) if raw else None
            except ValueError:
                return err.code, raw.decode(errors="replace")


class MirrorMakerProcess(JvmProcess):
    """MirrorMaker 2 in dedicated mode with ``settings`` as its ``mm2.properties``. It listens
    on no port of its own: :meth:`start` returns once the JVM runs; callers wait for the
    mirrored data."""

    name = "mirrormaker2"
    main_class = "org.apache.kafka.connect.mirror.MirrorMaker"

    def __init__(self, work_dir: Path, settings: Mapping[str, str]) -> None:
        self.work_dir = Path(work_dir)
        self.settings = dict(settings)
        self.config_file = self.work_dir / "mm2.properties"
        self.log_file = self.work_dir / "mm2.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def prepare(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        write_properties(self.config_file, self.settings)

    def arguments(self) -> list[str]:
        return [str(self.config_file)]

    def start(self, timeout: float = 30.0) -> Self:
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError("mirrormaker already running")
        self.prepare()
        log = open(self.log_file, "ab")  # noqa: SIM115 - the child owns it until it exits
        try:
            self._proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, env=dict(os.environ))  # fmt: skip
        finally:
            log.close()
        time.sleep(1.0)
        if self._proc.poll() is not None:
            raise RuntimeError(f"mirrormaker exited with {self._proc.returncode}:\n"
                               f"{self.log_tail()}")  # fmt: skip
        return self
