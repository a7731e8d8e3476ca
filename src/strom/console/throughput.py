"""The overview's throughput sparkline, from the Kafka API alone (no /metrics needed).

A daemon thread asks for the log end offset of every partition every ``interval`` seconds
(ListOffsets) and keeps the last :data:`SAMPLES` totals; the rate between two samples is
messages produced per second across all non-internal topics. Offsets of topics deleted
between two samples would make the difference negative: such a step counts as 0. The first
sample is taken at start, so a rate is known one interval later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from strom.admin.errors import AdminError

LOG = logging.getLogger("strom.console.throughput")
SAMPLES = 60
WIDTH, HEIGHT = 240, 40


class ThroughputSampler:
    """Total log end offset sampled every ``interval`` seconds; rates between samples."""

    def __init__(self, total: Callable[[], int], interval: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._total = total
        self.interval = interval
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque(maxlen=SAMPLES + 1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def sample(self) -> None:
        """Take one sample now (the thread's body; tests call it directly)."""
        try:
            value = self._total()
        except AdminError as exc:
            LOG.warning("throughput sample failed: %s", exc.message)
            return
        except Exception as exc:  # noqa: BLE001 - the sampler must outlive a client error
            LOG.warning("throughput sample failed: %s: %s", type(exc).__name__, exc)
            return
        with self._lock:
            self._samples.append((self._clock(), value))

    def rates(self) -> list[float]:
        """Messages per second between consecutive samples, oldest first."""
        with self._lock:
            samples = list(self._samples)
        return [max(b - a, 0) / max(tb - ta, 1e-9)
                for (ta, a), (tb, b) in zip(samples, samples[1:], strict=False)]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="strom-console-throughput",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 15)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


def sparkline_points(rates: list[float], width: int = WIDTH, height: int = HEIGHT) -> str:
    """SVG polyline points for ``rates`` scaled to the box (the highest rate at the top)."""
    if not rates:
        return ""
    if len(rates) == 1:
        rates = rates * 2  # one rate known: a level line, not an invisible point
    top = max(max(rates), 1e-9)
    step = width / max(len(rates) - 1, 1)
    return " ".join(f"{i * step:.1f},{height - 2 - (r / top) * (height - 4):.1f}"
                    for i, r in enumerate(rates))
