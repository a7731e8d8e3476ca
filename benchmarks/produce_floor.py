"""Where the floor of a single-message Produce request's broker CPU is: each essential step
timed alone, in a warm loop.

``produce_cpu.py`` and ``scale.py`` measure the whole request (about 50 us on a shared 2-core
machine before the single-partition fast path, 21-28 us after). This script times the parts no broker can skip, one at a time, each run
``--number`` times in a tight loop (best of five): peeking and decoding the request (the
pre-decode length check and ``kio``), the batch checks Kafka requires (CRC-32C, the walk over
every record), the ``pwritev`` into the page cache, the whole ``Log.append`` (those checks
plus offsets, roll check, indexes, producer state), and encoding the response. A warm loop
is the best case: in the broker the same calls interleave with everything else and take
longer (py-spy: ``Log.append`` about 20 us of a request, against about 12 us here).
``essential_sum`` is what the broker runs for a one-partition request (``read_single``, the
append, ``template_response``); ``essential_sum_generic`` the same through ``kio``.

    PYTHONPATH=src python benchmarks/produce_floor.py

Prints one JSON line (microseconds per call).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from produce_cpu import produce_frames  # noqa: E402


def measure(number: int) -> dict[str, Any]:
    from strom.clock import SystemClock
    from strom.protocol import hot_path, produce_fast
    from strom.protocol import record_batch as rb
    from strom.protocol.messages import decode_request, peek_header
    from strom.storage.batch_validation import AppendOrigin, validate_records, validate_shape
    from strom.storage.log import Log
    from strom.storage.log_config import LogConfig

    frame = produce_frames("bench", 1, 0)[0][4:]  # the body after the size prefix
    _header, request = decode_request(frame)
    records = request.topic_data[0].partition_data[0].records
    header = rb.parse_header(records)
    config = LogConfig.from_configs({}, {})
    now = int(time.time() * 1000)
    response = hot_path.ProduceResponse(
        [("bench", [hot_path.ProducePartition(0, 0, 5, -1, 0)], None)]
    )
    reader = produce_fast.SingleProduceReader()
    reader.read(frame)  # the layout remembered, as on a producer's connection
    template = produce_fast.ResponseTemplate(9, "bench")
    tmp = Path(tempfile.mkdtemp(prefix="strom-producefloor-"))
    log = Log.open(tmp / "bench-0", config, SystemClock())
    fd = os.open(tmp / "raw", os.O_RDWR | os.O_CREAT, 0o644)
    head, rest = bytes(records[: rb.HEADER_SIZE]), memoryview(records)[rb.HEADER_SIZE :]
    position = [0]

    def pwritev() -> None:
        os.pwritev(fd, (head, rest), position[0])
        position[0] += len(records)

    def per_call(fn: Callable[[], object]) -> float:
        return round(min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6, 2)

    try:
        steps = {
            "peek_header": per_call(lambda: peek_header(frame)),
            "decode_request": per_call(lambda: decode_request(frame)),
            "validate_shape_crc": per_call(lambda: validate_shape(header, records, config)),
            "validate_records_scan": per_call(
                lambda: validate_records(header, records, config, now, AppendOrigin.CLIENT)
            ),
            "pwritev": per_call(pwritev),
            "log_append": per_call(lambda: log.append(records)),
            "encode_response": per_call(lambda: hot_path.produce_frame(9, 7, response)),
            # what the broker runs for a one-partition request (broker/connection.py decode/encode)
            "read_single": per_call(lambda: reader.read(frame)),
            "template_response": per_call(lambda: template.frame(7, 0, 5, -1, 0)),
        }
    finally:
        os.close(fd)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    steps["essential_sum_generic"] = round(
        steps["peek_header"] + steps["decode_request"] + steps["log_append"]
        + steps["encode_response"], 2,
    )  # fmt: skip
    steps["essential_sum"] = round(
        steps["read_single"] + steps["log_append"] + steps["template_response"], 2
    )
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per timing")
    args = parser.parse_args()
    import strom

    result = {"us_per_call": measure(args.number), "strom": str(Path(strom.__file__).parent)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
