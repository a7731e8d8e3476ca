"""Broker CPU per produced message for the very same Produce requests, several trees in one run.

``produce_compare.py`` lets a real client set the batches: how many records a request carries
depends on how fast the broker answers, so a faster broker is sent smaller batches and pays
more per message (its per-round CPU ratios spread 0.5-1.8 on a quiet machine). Here every
tree is sent identical bytes: ``--requests`` Produce v9 frames, each one batch of ``--records``
records of ``--value-bytes`` (default 8,000 x 100 B: about 0.9 MB, near a full librdkafka batch of 1,000,000 bytes; the topic limit is 1 MiB),
acks=1, to a one-partition topic, ``--window`` requests in flight on one plain socket (as
librdkafka pipelines). The figure is the broker process's CPU from the first request to the
last response, summed over its threads from ``/proc/<pid>/task/*/schedstat`` (nanoseconds,
so a one-second phase still measures to the microsecond), per message.

Each round starts every tree in turn (the order rotates), as ``python -m strom serve`` with
``PYTHONPATH=<tree>/src`` (produce_compare's TreeBroker: a first-wave checkout works), and
stops it by PID. ``ratios``: for each tree against the first, the median and spread of the
per-round ratios.

    python benchmarks/produce_wire.py --tree after=. --tree dfb5704=/work/wt-dfb5704 --rounds 5

Prints one JSON line (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import create_topic, env_info, log  # noqa: E402
from produce_compare import TreeBroker  # noqa: E402
from produce_cpu import produce_frames  # noqa: E402


def broker_cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far, in ns (``schedstat``'s first field)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total


def read_frame(sock: socket.socket) -> bytes:
    head = _read_exact(sock, 4)
    return _read_exact(sock, int.from_bytes(head, "big"))


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send_all(bootstrap: str, frames: list[bytes], window: int, timeout: float) -> None:
    """Send ``frames`` with at most ``window`` unanswered; every answer's error code must be 0."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sent = answered = 0
        while answered < len(frames):
            while sent < len(frames) and sent - answered < window:
                sock.sendall(frames[sent])
                sent += 1
            check_produce_response(read_frame(sock))
            answered += 1


def check_produce_response(frame: bytes) -> None:
    """A Produce v9 response to one partition: correlation id, tagged fields, one topic, one
    partition whose error code is the two bytes after its index. Only that code is read."""
    pos = 4 + 1  # correlation id, empty tagged fields of the flexible header
    pos += 1  # topics: compact array length (1 topic)
    name_len = frame[pos] - 1  # compact string length (short names: one varint byte)
    pos += 1 + name_len
    pos += 1  # partitions: compact array length (1 partition)
    error = int.from_bytes(frame[pos + 4 : pos + 6], "big", signed=True)
    if error:
        raise RuntimeError(f"Produce answered error code {error}")


def measure(broker: TreeBroker, args: argparse.Namespace, rnd: int) -> dict[str, Any]:
    broker.start()
    try:
        assert broker.pid is not None
        topic = f"wire-{rnd}"
        create_topic(broker.bootstrap, topic, 1)
        send_all(broker.bootstrap, produce_frames(topic, 3, 1, 1, args.records, args.value_bytes),
                 args.window, args.timeout)  # warm: the partition's first segment open  # fmt: skip
        frames = produce_frames(topic, args.requests, 10, 1, args.records, args.value_bytes)
        time.sleep(0.5)
        cpu0 = broker_cpu_ns(broker.pid)
        start = time.perf_counter()
        send_all(broker.bootstrap, frames, args.window, args.timeout)
        wall = time.perf_counter() - start
        cpu = broker_cpu_ns(broker.pid) - cpu0
    finally:
        broker.stop()
    messages = args.requests * args.records
    return {"cpu_ns_per_msg": round(cpu / messages, 2), "msgs_per_s": round(messages / wall),
            "broker_cores_busy": round(cpu / 1e9 / wall, 2)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=PATH",
                        help="a strom source tree; the first is the reference of the ratios")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--records", type=int, default=8000, help="records per request")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--window", type=int, default=5, help="requests in flight")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="strom-produce-wire-"))
    trees = [TreeBroker(name, Path(path).resolve(), work)
             for name, path in (t.split("=", 1) for t in args.tree)]  # fmt: skip
    env = env_info()
    rounds: dict[str, list[dict[str, Any]]] = {t.name: [] for t in trees}
    for rnd in range(args.rounds):
        order = trees[rnd % len(trees) :] + trees[: rnd % len(trees)]
        for tree in order:
            result = measure(tree, args, rnd)
            log(f"round {rnd}: {tree.name} {result}")
            rounds[tree.name].append(result)
    out: dict[str, Any] = {"requests": args.requests, "records": args.records,
                           "value_bytes": args.value_bytes, "window": args.window}  # fmt: skip
    for name, results in rounds.items():
        values = [r["cpu_ns_per_msg"] for r in results]
        out[name] = {"cpu_ns_per_msg": {"median": statistics.median(values), "min": min(values),
                                        "max": max(values)},  # fmt: skip
                     "rounds": results}
    first = trees[0].name
    out["ratios"] = {}
    for tree in trees[1:]:
        per_round = [a["cpu_ns_per_msg"] / b["cpu_ns_per_msg"]
                     for a, b in zip(rounds[first], rounds[tree.name], strict=True)]  # fmt: skip
        out["ratios"][f"{first}/{tree.name}"] = {
            "median": round(statistics.median(per_round), 3), "min": round(min(per_round), 3),
            "max": round(max(per_round), 3), "rounds": [round(r, 3) for r in per_round]}  # fmt: skip
    out["env"] = env
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
