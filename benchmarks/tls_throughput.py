"""TLS cost: produce and consume throughput over TLS as a ratio of PLAINTEXT, and broker CPU
per TLS connection set up, measured on one broker in the same run.

One broker (this checkout's ``src``) with a PLAINTEXT and an SSL listener (a test CA of
:mod:`strom.testing.tls`, EC P-256, TLS 1.3). For each listener, alternating, ``--rounds``
times: confluent-kafka produces ``--mib`` MiB of 1 KB values (acks=1, no compression, 64 KB
batches) to a fresh topic, then consumers read it all back from offset 0 ``--reads`` times
(the broker's CPU per MiB served needs that much data to be measured); wall time and the
broker's CPU (utime + stime from /proc) are taken around each phase. The best round of each
counts (noise on a shared machine only slows). Then ``--connections`` connections are opened
and closed on each listener one after the other (the SSL ones with a full handshake and an
ApiVersions request answered, so the TLS session is really up), and the broker's CPU per
connection is reported, as is the TLS extra (SSL minus PLAINTEXT).

Prints one JSON line: MB/s per phase and listener, tls/plaintext ratios of throughput and of
broker CPU per MiB, and broker CPU per connection in µs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_seconds, env_info, remove  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
API_VERSIONS_V0 = struct.pack(">ihhih", 10 + 0, 18, 0, 1, 0)  # size, key, version, corr, no id


def _produce(conf: dict[str, str], topic: str, mib: int) -> int:
    from confluent_kafka import Producer

    producer = Producer({**conf, "linger.ms": 20, "batch.size": 65536, "acks": "1",
                         "compression.type": "none"})  # fmt: skip
    value = os.urandom(1000)
    count = mib * (1 << 20) // 1000
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return count * 1000


def _consume(conf: dict[str, str], topic: str, total: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 4 << 20})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    deadline = time.monotonic() + 300
    try:
        while got < total and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 1.0):
                if msg.error() is None:
                    got += len(msg.value())
    finally:
        consumer.close()
    assert got == total, f"read {got} of {total} bytes"
    return got


def _recv(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


def _connect(port: int, context: ssl.SSLContext | None) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        conn: socket.socket = context.wrap_socket(raw, server_hostname="127.0.0.1") if (
            context is not None) else raw  # fmt: skip
        conn.sendall(API_VERSIONS_V0)
        size = struct.unpack(">i", _recv(conn, 4))[0]
        _recv(conn, size)
        if context is not None:
            conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=4, help="full reads per consume phase")
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--src", default=str(ROOT / "src"))
    args = parser.parse_args()

    os.environ["PYTHONPATH"] = f"{args.src}:{ROOT}"
    sys.path.insert(0, args.src)
    from strom.testing.process import BrokerProcess, free_port
    from strom.testing.tls import make_tls_files

    work = Path(tempfile.mkdtemp(prefix="strom-tls-bench-"))
    try:
        files = make_tls_files(work / "tls")
        plain, tls = free_port(), free_port()
        props = {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
                 **files.listener_properties("SSL")}  # fmt: skip
        config = work / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        proc = BrokerProcess(work / "data", port=plain, config_file=config)
        confs = {
            "plaintext": {"bootstrap.servers": f"127.0.0.1:{plain}"},
            "tls": {"bootstrap.servers": f"127.0.0.1:{tls}", **files.client_config()},
        }
        best: dict[str, dict[str, float]] = {}
        with proc:
            for r in range(args.rounds):
                for name, conf in confs.items():
                    topic = f"bench-{name}-{r}"
                    for phase in ("produce", "consume"):
                        cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
                        if phase == "produce":
                            nbytes = produced = _produce(conf, topic, args.mib)
                        else:  # read --reads times: enough broker CPU to measure per MiB
                            nbytes = sum(_consume(conf, topic, produced)
                                         for _ in range(args.reads))  # fmt: skip
                        wall = time.perf_counter() - t0
                        cpu = (cpu_seconds(proc.pid) or 0.0) - (cpu0 or 0.0)
                        mib = nbytes / (1 << 20)
                        key = f"{phase}_{name}"
                        entry = {"mb_s": round(mib / wall, 1), "cpu_ms_per_mib":
                                 round(cpu * 1000 / mib, 2)}  # fmt: skip
                        if key not in best or entry["mb_s"] > best[key]["mb_s"]:
                            best[key] = entry
            client_tls = ssl.create_default_context(cafile=str(files.ca))
            per_conn: dict[str, float] = {}
            for name, port, ctx in (("plaintext", plain, None), ("tls", tls, client_tls)):
                _connect(port, ctx)  # warm
                cpu0 = cpu_seconds(proc.pid) or 0.0
                for _ in range(args.connections):
                    _connect(port, ctx)
                time.sleep(0.2)  # the broker's side of the last closes
                cpu = (cpu_seconds(proc.pid) or 0.0) - cpu0
                per_conn[name] = cpu * 1e6 / args.connections
    finally:
        remove(work)

    def ratio(a: float, b: float) -> float:
        return round(a / b, 3) if b else float("nan")

    result = {
        "benchmark": "tls_throughput",
        "mib": args.mib, "rounds": args.rounds, "reads": args.reads,
        "connections": args.connections,
        **{k: v for k, v in sorted(best.items())},
        "produce_tls_over_plaintext": ratio(best["produce_tls"]["mb_s"],
                                            best["produce_plaintext"]["mb_s"]),
        "consume_tls_over_plaintext": ratio(best["consume_tls"]["mb_s"],
                                            best["consume_plaintext"]["mb_s"]),
        "produce_cpu_per_mib_tls_over_plaintext": ratio(
            best["produce_tls"]["cpu_ms_per_mib"], best["produce_plaintext"]["cpu_ms_per_mib"]),
        "consume_cpu_per_mib_tls_over_plaintext": ratio(
            best["consume_tls"]["cpu_ms_per_mib"], best["consume_plaintext"]["cpu_ms_per_mib"]),
        "broker_cpu_us_per_connection": {k: round(v, 1) for k, v in per_conn.items()},
        "broker_cpu_us_per_tls_setup": round(per_conn["tls"] - per_conn["plaintext"], 1),
        "env": env_info(),
    }  # fmt: skip
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
