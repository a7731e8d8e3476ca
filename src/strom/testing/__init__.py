"""A testing kit for strom users and strom's own tests.

:class:`BrokerProcess` starts a real ``strom serve`` process on a free 127.0.0.1 port with its
own data directory, waits until it accepts connections, and stops it by its PID. Use it as a
context manager::

    with BrokerProcess(tmp_path / "data") as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})

:class:`ConnectWorkerProcess` does the same for a ``strom connect standalone`` worker.
"""

from strom.testing.connect import ConnectWorkerProcess
from strom.testing.process import BrokerProcess, free_port, wait_for_port

__all__ = ["BrokerProcess", "ConnectWorkerProcess", "free_port", "wait_for_port"]
