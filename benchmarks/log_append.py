"""CPU cost of ``Log.append`` for a client Produce batch: µs per call (process CPU time).

Cases: 1-record and 100-record batches (100-byte values, 10-byte keys), uncompressed and lz4,
on a plain and on a compacted topic (which must look at every key). Each append writes to a
fresh log in a temporary directory (page cache, no fsync). Prints one JSON line; compare runs
of two commits by ratio, on the same machine in the same session.

    PYTHONPATH=src python benchmarks/log_append.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from strom.clock import SystemClock
from strom.protocol import compression
from strom.protocol.record_batch import build_batch
from strom.storage.log import Log
from strom.storage.log_config import LogConfig


def _batch(n: int, codec: int, now: int) -> bytes:
    recs = [(b"key-%06d" % i, b"v" * 100, [], now) for i in range(n)]
    return build_batch(recs, compression=codec)  # type: ignore[arg-type]


def _measure(dir: Path, batch: bytes, config: LogConfig, seconds: float) -> float:
    log = Log.open(dir, config, SystemClock())
    try:
        calls = 0
        start = time.process_time()
        while True:
            for _ in range(200):
                log.append(batch)
            calls += 200
            spent = time.process_time() - start
            if spent >= seconds:
                return spent / calls * 1e6
    finally:
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    now = SystemClock().time_ms()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1, 100):
            for codec in (compression.NONE, compression.LZ4):
                for compact in (False, True):
                    name = f"us_{n}rec_{compression.CODEC_NAMES[codec]}" + ("_compact" if compact else "")
                    cfg = LogConfig(cleanup_policy="compact") if compact else LogConfig()
                    path = Path(tmp) / f"{name}-0"
                    out[name] = round(_measure(path, _batch(n, codec, now), cfg, args.seconds), 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
