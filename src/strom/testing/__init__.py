"""A testing kit for strom users and strom's own tests.

:class:`BrokerProcess` starts a real ``strom serve`` process on a free 127.0.0.1 port with its
own data directory, waits until it accepts connections, and stops it by its PID. Use it as a
context manager::

    with BrokerProcess(tmp_path / "data") as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

:class:`ConnectWorkerProcess` does the same for a ``strom connect standalone`` worker, and
:class:`ZooKeeperProcess` for a ZooKeeper server from Debian's ``zookeeper`` package (cluster
mode: ``BrokerProcess(..., extra_args=["--zookeeper", zk.connect_string, "--broker-id", "1"])``).

:mod:`strom.testing.handles` counts the librdkafka handles (confluent-kafka clients) alive in the
process and frees the ones only a reference cycle holds, so that no client outlives the broker
of its test and keeps reconnecting to it.
"""

from strom.testing.connect import ConnectWorkerProcess
from strom.testing.process import BrokerProcess, free_port, wait_for_port
from strom.testing.zookeeper import ZooKeeperProcess, zookeeper_available

__all__ = [
    "BrokerProcess",
    "ConnectWorkerProcess",
    "ZooKeeperProcess",
    "free_port",
    "wait_for_port",
    "zookeeper_available",
]
