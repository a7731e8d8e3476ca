"""``strom produce`` while its broker goes away (issue 21): it says the broker is unreachable
(not "refused"), stops reading its input, reports the records it gave up on in a few lines
with their line ranges, ends with the summary and exit status 1; and every record it counted
as delivered is in the topic once the broker is back."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from strom.testing import BrokerProcess
from tests.integration.cli_helpers import Cli

LINES = 2_000_000
DELIVERY_TIMEOUT_MS = 3000


def _ranges(text: str) -> set[int]:
    """``1, 4-9, 12`` as the set of numbers."""
    out: set[int] = set()
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def _end_offset(cli: Cli, topic: str) -> int:
    [row] = json.loads(cli.ok("topic", "describe", topic, "-p", "--format", "json"))
    return int(row["log_end_offset"])


def test_broker_gone_mid_stream(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        cli = Cli(broker.bootstrap)
        cli.ok("topic", "create", "outage", "-p", "1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "strom", "produce", "outage", "-b", broker.bootstrap,
             "--delivery-timeout-ms", str(DELIVERY_TIMEOUT_MS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        written = [0]

        def feed() -> None:  # `seq 1 2000000 |`, stopping when the reader has gone
            assert proc.stdin is not None
            try:
                for start in range(1, LINES + 1, 1000):
                    chunk = range(start, min(start + 1000, LINES + 1))
                    proc.stdin.write("".join(f"{i}\n" for i in chunk).encode())
                    written[0] = chunk[-1]
                proc.stdin.close()
            except (BrokenPipeError, ValueError):
                pass

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        deadline = time.monotonic() + 60
        while _end_offset(cli, "outage") < 5000:  # mid-stream: some acknowledged already
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
            time.sleep(0.2)
        assert broker.pid is not None
        gone_at = time.monotonic()
        os.kill(broker.pid, signal.SIGINT)  # Ctrl-C to the broker
        assert broker.wait(30) is not None
        _out, err = proc.communicate(timeout=DELIVERY_TIMEOUT_MS / 1000 + 60)
        took = time.monotonic() - gone_at
        writer.join(10)
        stderr = err.decode()
        lines = stderr.strip().splitlines()

        assert proc.returncode == 1, stderr
        assert took < DELIVERY_TIMEOUT_MS / 1000 + 40, took  # gave up, did not read on
        assert len(lines) <= 6, stderr  # a few lines, not one per record
        assert "refused" not in stderr and "Traceback" not in stderr, stderr
        assert "unreachable" in lines[0], stderr
        produced = re.fullmatch(r"Produced (\d+) of (\d+) message\(s\) .*", lines[-2])
        assert produced is not None, stderr
        summary = re.fullmatch(
            r"strom: error: (\d+) of (\d+) record\(s\) not produced to 'outage' \(stopped "
            r"reading after line (\d+): the broker at \S+ is unreachable\): line\(s\) ([-\d, ]+)",
            lines[-1])  # fmt: skip
        assert summary is not None, stderr
        failed, total, stopped = (int(summary.group(i)) for i in (1, 2, 3))
        assert total == stopped == int(produced.group(2))
        assert total < LINES and total <= written[0]  # it stopped reading its input
        not_produced = _ranges(summary.group(4))
        assert len(not_produced) == failed > 0
        acknowledged = set(range(1, total + 1)) - not_produced
        assert len(acknowledged) == int(produced.group(1)) > 0

        broker.start()  # the broker comes back: nothing it acknowledged is lost
        got = Cli(broker.bootstrap).ok("consume", "outage", "-o", "start", "-e",
                                       "--timeout", "30", timeout=120)  # fmt: skip
        values = [int(v) for v in got.split()]
        assert acknowledged <= set(values), sorted(acknowledged - set(values))[:10]
        assert len(values) == len(set(values))  # and nothing twice
    finally:
        broker.stop()
