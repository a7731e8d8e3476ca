"""SASL's cost: a flood of failed logins beside a working producer, and the broker's CPU per
authenticated connection.

Starts one strom broker (a child process) from a server.properties with a PLAINTEXT listener
and a SASL_PLAINTEXT listener (PLAIN from the JAAS configuration, SCRAM-SHA-256/512 users made
offline with ``strom user create --data-dir``), then:

1. **flood**: a confluent-kafka producer authenticated with SCRAM-SHA-256 sends 100-byte
   messages (acks=1, linger 5 ms) for ``--seconds``, alone, then again for ``--seconds`` while
   ``--flooders`` concurrent raw connections log in with a wrong password over and over
   (SaslHandshake + SaslAuthenticate, each answered SASL_AUTHENTICATION_FAILED after
   ``connection.failed.authentication.delay.ms``, then closed). Reported: the producer's
   messages/s in both phases and their ratio (1.0 = the flood costs the producer nothing),
   the failed logins per second, and the lines the broker logged for them (one per (host,
   reason) per minute: strom.broker.auth_failures; every one before session 35); then
   the flood alone for ``--seconds``/2: the broker's CPU per failed login.
2. **cpu per connection**: ``--connections`` sequential connections each authenticate
   (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; SCRAM through scramp's client, the RFC's algorithm)
   and send one Metadata request; against the same on the PLAINTEXT listener with ApiVersions
   + Metadata. Reported: broker CPU ms per connection (utime+stime of the broker process from
   /proc) for each, and each mechanism's as a ratio of plaintext's.

Both phases run in the same process on the same machine, so the ratios are what to quote.
Prints one JSON line (progress on stderr).

    PYTHONPATH=src python benchmarks/sasl_auth.py [--seconds 8] [--flooders 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_seconds, env_info, log, remove, workdir  # noqa: E402

from strom.protocol.messages import (  # noqa: E402
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_class,
)
from strom.testing.process import BrokerProcess, free_port, wait_for_port  # noqa: E402

PLAIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              'user_alice="alice-secret";')  # fmt: skip


def frame(api_key: int, version: int, correlation: int, **fields: Any) -> bytes:
    return encode_request(RequestHeader(api_key, version, correlation, "bench"),
                          build(request_class(api_key, version), **fields))  # fmt: skip


METADATA = frame(3, 12, 3, topics=None, allow_auto_topic_creation=False,
                 include_topic_authorized_operations=False)  # fmt: skip


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def _flood(host: str, port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    handshake = frame(17, 1, 1, mechanism="PLAIN")
    authenticate = frame(36, 2, 2, auth_bytes=b"\0alice\0not-the-password")
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(handshake + authenticate)
            await _read_frame(reader)
            answer = await _read_frame(reader)
            _corr, response = decode_response(36, 2, answer)
            counts["failed" if response.error_code == 58 else "other"] += 1
            await reader.read()  # the broker closes the connection
            writer.close()
        except (OSError, asyncio.IncompleteReadError):
            counts["errors"] += 1


def flood(host: str, port: int, flooders: int, stop: Any, shared: Any) -> None:
    """In a process of its own (not the producer's: no GIL shared with it): ``flooders``
    connections logging in wrongly until ``stop`` is set; the counts into ``shared``."""
    counts = {"failed": 0, "other": 0, "errors": 0}
    local_stop = threading.Event()

    async def report() -> None:
        while not stop.is_set():
            shared[0], shared[1], shared[2] = counts["failed"], counts["other"], counts["errors"]
            await asyncio.sleep(0.05)
        local_stop.set()
        shared[0], shared[1], shared[2] = counts["failed"], counts["other"], counts["errors"]

    async def main() -> None:
        await asyncio.gather(report(), *(_flood(host, port, local_stop, counts)
                                         for _ in range(flooders)))  # fmt: skip

    asyncio.run(main())


def produce_for(conf: dict[str, Any], topic: str, seconds: float) -> float:
    from confluent_kafka import Producer

    producer = Producer({**conf, "linger.ms": 5, "acks": 1})
    value = b"x" * 100
    delivered = [0]

    def done(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1

    producer.produce(topic, value, on_delivery=done)
    producer.flush(30)  # connected, authenticated, metadata known
    delivered[0] = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, value, on_delivery=done)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    return delivered[0] / (time.monotonic() - start)


def connect_cost(host: str, port: int, mechanism: str | None, count: int, pid: int) -> float:
    """Broker CPU ms per connection that authenticates (``mechanism``) and asks Metadata."""
    import socket

    import scramp

    def request(sock: socket.socket, data: bytes, api_key: int, version: int) -> Any:
        sock.sendall(data)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        return decode_response(api_key, version, _recv(sock, size))[1]

    before = cpu_seconds(pid) or 0.0
    for _ in range(count):
        with socket.create_connection((host, port)) as sock:
            if mechanism is None:
                request(sock, frame(18, 3, 1, client_software_name="b",
                                    client_software_version="1"), 18, 3)  # fmt: skip
            else:
                request(sock, frame(17, 1, 1, mechanism=mechanism), 17, 1)
                if mechanism == "PLAIN":
                    answer = request(sock, frame(36, 2, 2, auth_bytes=b"\0alice\0alice-secret"),
                                     36, 2)  # fmt: skip
                else:
                    client = scramp.ScramClient([mechanism], "bob", "bob-secret")
                    first = request(sock, frame(36, 2, 2,
                                                auth_bytes=client.get_client_first().encode()),
                                    36, 2)  # fmt: skip
                    client.set_server_first(first.auth_bytes.decode())
                    answer = request(sock, frame(36, 2, 3,
                                                 auth_bytes=client.get_client_final().encode()),
                                     36, 2)  # fmt: skip
                    client.set_server_final(answer.auth_bytes.decode())
                assert answer.error_code == 0, answer
            request(sock, METADATA, 3, 12)
    time.sleep(0.2)  # the broker's close handling
    return ((cpu_seconds(pid) or 0.0) - before) * 1000 / count


def _recv(sock: Any, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--flooders", type=int, default=32)
    parser.add_argument("--connections", type=int, default=300)
    args = parser.parse_args()
    work = workdir()
    internal, sasl = free_port(), free_port()
    props = work / "server.properties"
    props.write_text(
        f"listeners=INTERNAL://127.0.0.1:{internal},SASL_PLAINTEXT://127.0.0.1:{sasl}\n"
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT\n"
        "inter.broker.listener.name=INTERNAL\n"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n"
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}\n"
    )
    data = work / "data"
    data.mkdir()
    subprocess.run([sys.executable, "-m", "strom", "user", "create", "bob", "--password",
                    "bob-secret", "--data-dir", str(data)], check=True, capture_output=True)  # fmt: skip
    proc = BrokerProcess(data, port=internal, config_file=props)
    try:
        proc.start()
        assert wait_for_port("127.0.0.1", sasl, 30)
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{internal}"})
        admin.create_topics([NewTopic("bench", 1, 1)])["bench"].result(timeout=30)
        conf = {"bootstrap.servers": f"127.0.0.1:{sasl}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob",
                "sasl.password": "bob-secret"}  # fmt: skip
        log("producer alone ...")
        alone = produce_for(conf, "bench", args.seconds)
        log(f"  {alone:.0f} msgs/s; with {args.flooders} flooders ...")
        import multiprocessing

        stop = multiprocessing.Event()
        shared = multiprocessing.Array("q", 3)
        flooder = multiprocessing.Process(target=flood, args=("127.0.0.1", sasl, args.flooders,
                                                              stop, shared), daemon=True)  # fmt: skip
        logged_before = proc.log_file.read_text(errors="replace").count("failed authentication")
        flooder.start()
        time.sleep(1.5)  # the flood is running
        failed_start = shared[0]
        t0 = time.monotonic()
        flooded = produce_for(conf, "bench", args.seconds)
        elapsed = time.monotonic() - t0
        failed_during = shared[0] - failed_start
        # the flood alone: the broker's CPU per failed login
        pid = proc.pid
        assert pid is not None
        cpu0, failed0, t1 = cpu_seconds(pid) or 0.0, shared[0], time.monotonic()
        time.sleep(args.seconds / 2)
        cpu_per_failed_ms = ((cpu_seconds(pid) or 0.0) - cpu0) * 1000 / max(1, shared[0] - failed0)
        alone_rate = (shared[0] - failed0) / (time.monotonic() - t1)
        stop.set()
        flooder.join(30)
        counts = {"failed": shared[0], "other": shared[1], "errors": shared[2]}
        time.sleep(0.5)
        logged = proc.log_file.read_text(errors="replace").count("failed authentication")
        log(f"  {flooded:.0f} msgs/s; {failed_during / elapsed:.0f} failed logins/s")
        cost: dict[str, float] = {}
        for name, port, mechanism in (("PLAINTEXT", internal, None), ("PLAIN", sasl, "PLAIN"),
                                      ("SCRAM-SHA-256", sasl, "SCRAM-SHA-256"),
                                      ("SCRAM-SHA-512", sasl, "SCRAM-SHA-512")):  # fmt: skip
            log(f"CPU per connection: {name} ...")
            cost[name] = round(connect_cost("127.0.0.1", port, mechanism, args.connections,
                                            pid), 3)  # fmt: skip
    finally:
        proc.stop()
        remove(work)
    print(json.dumps({
        "benchmark": "sasl_auth",
        "producer_msgs_per_s": {"alone": round(alone), "beside_failed_login_flood": round(flooded)},
        "ratio_flooded_vs_alone": round(flooded / alone, 3) if alone else None,
        "failed_logins_per_s": round(failed_during / elapsed, 1),
        "failed_logins": counts["failed"], "flood_other_answers": counts["other"],
        "flood_connection_errors": counts["errors"],
        "failures_logged": logged - logged_before,
        "flood_alone_failed_logins_per_s": round(alone_rate, 1),
        "broker_cpu_ms_per_failed_login": round(cpu_per_failed_ms, 3),
        "broker_cpu_ms_per_connection": cost,
        "ratio_vs_plaintext": {k: round(v / cost["PLAINTEXT"], 2) for k, v in cost.items()
                               if cost.get("PLAINTEXT")},
        "settings": {"seconds": args.seconds, "flooders": args.flooders,
                     "connections": args.connections, "failed_delay_ms": 100},
        "env": env_info(),
    }))  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
