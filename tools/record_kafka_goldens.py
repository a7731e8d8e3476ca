#!/usr/bin/env python3
"""Record what Kafka's own tools print against a real Apache Kafka: tests/jvm/golden/*.txt.

Starts Apache Kafka (the ``kafka_2.13`` release the ``kafka-server`` profile of ``jvm/pom.xml``
names, resolved by Maven; nothing of it is committed) as one KRaft node (broker and controller,
node id 1, as strom's single broker is broker 1; eligible leader replicas off, as strom has
none) on a free 127.0.0.1 port with a temporary
log directory, runs ``tests.jvm.tools_scenario.SINGLE`` against it, and writes the normalized
outputs to ``tests/jvm/golden/tools-single.txt``; then stops Kafka by its PID. Run it again
after changing the scenario or moving to another Kafka release::

    python tools/record_kafka_goldens.py

needs java >= 17 and mvn; takes about a minute.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import uuid
from base64 import urlsafe_b64encode
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from strom.testing.process import free_port, wait_for_port  # noqa: E402
from tests.jvm import tools_scenario  # noqa: E402
from tests.jvm.jvm import JVM_DIR, JVM_FLAGS  # noqa: E402

SERVER = """process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={logs}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
"""


def kafka_classpath() -> str:
    listing = JVM_DIR / "target" / "kafka-classpath.txt"
    subprocess.run(["mvn", "-B", "-q", "-f", str(JVM_DIR / "pom.xml"), "-P", "kafka-server",
                    "dependency:build-classpath", f"-Dmdep.outputFile={listing}"],
                   check=True)  # fmt: skip
    return listing.read_text().strip()


def main() -> None:
    classpath = kafka_classpath()
    with tempfile.TemporaryDirectory(prefix="kafka-golden-") as tmp:
        work = Path(tmp)
        port, cport = free_port(), free_port()
        props = work / "server.properties"
        props.write_text(SERVER.format(port=port, cport=cport, logs=work / "logs"))
        cluster_id = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        java = ["java", *JVM_FLAGS, "-cp", classpath]
        # ELR off (KIP-966, KRaft's; strom has none): its format would also set a cluster-wide
        # min.insync.replicas=1 that kafka-topics --describe then lists with every topic
        subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                        str(props), "--feature", "eligible.leader.replicas.version=0"],
                       check=True, capture_output=True)  # fmt: skip
        log = open(work / "kafka.log", "wb")  # noqa: SIM115
        kafka = subprocess.Popen([*java, "kafka.Kafka", str(props)], stdout=log,
                                 stderr=subprocess.STDOUT)  # fmt: skip
        try:
            if not wait_for_port("127.0.0.1", port, 120):
                raise SystemExit(f"Kafka did not listen:\n{(work / 'kafka.log').read_text()}")
            bootstrap = f"127.0.0.1:{port}"
            steps = tools_scenario.SINGLE
            results = tools_scenario.run_scenario(steps, bootstrap, work / "run")
            text = tools_scenario.render(steps, results)
        finally:
            kafka.terminate()
            try:
                kafka.wait(60)
            except subprocess.TimeoutExpired:
                kafka.kill()
                kafka.wait()
            log.close()
    tools_scenario.GOLDEN_DIR.mkdir(exist_ok=True)
    out = tools_scenario.GOLDEN_DIR / "tools-single.txt"
    out.write_text(text)
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
