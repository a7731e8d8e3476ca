"""What became of each record ``strom produce`` read: delivered, refused, or given up on.

Every refused record is reported on stderr with its input line number and the real reason,
but a delivery failure that repeats (a broker gone away times out every queued record) is
one line: the first record is named at once, the others are counted and named as line ranges
in one more line when a different reason comes or at the end (:meth:`Delivery.close`).

The producer's own error callback tells when no broker answers (librdkafka's
``_ALL_BROKERS_DOWN``): :attr:`Delivery.unreachable` is then set until a record is delivered
again, and a record that times out meanwhile is reported as "the broker is unreachable", not
as refused. Once that has happened :attr:`Delivery.gave_up` is set: the broker stayed away
for a whole delivery timeout, so ``strom produce`` stops reading its input.
"""

from __future__ import annotations

import functools
import sys
import time
from collections import Counter
from typing import Any

from confluent_kafka import KafkaError, Message

from strom.admin.errors import describe_kafka_error

#: errors meaning "no answer" (not a refusal)
NO_ANSWER = {KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
             KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT_QUEUE}  # fmt: skip
TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE}
SHOWN_RANGES = 10


def line_ranges(lines: list[int], limit: int = SHOWN_RANGES) -> str:
    """``1, 4-9, 12`` (at most ``limit`` ranges, then ``, ...``)."""
    ranges: list[tuple[int, int]] = []
    for n in sorted(lines):
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], n)
        else:
            ranges.append((n, n))
    shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:limit]]
    return ", ".join(shown) + (", ..." if len(ranges) > limit else "")


class _Run:
    """Records refused for one reason, after the first (already reported)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.lines: list[int] = []


class Delivery:
    """Counts outcomes, reports refused records, keeps too-large ones for a retry alone."""

    def __init__(self, topic: str, bootstrap: str, delivery_timeout_s: float,
                 verbose: int) -> None:  # fmt: skip
        self.topic = topic
        self.bootstrap = bootstrap
        self.delivery_timeout_s = delivery_timeout_s
        self.verbose = verbose
        self.delivered = 0
        self.bytes = 0
        self.partitions: Counter[int] = Counter()
        self.refused: list[int] = []
        self.retry: list[tuple[int, dict[str, Any]]] = []
        self.retrying = False
        #: since when no broker answers (None: the last word was an answer)
        self.unreachable: float | None = None
        self.gave_up = False
        self._run: _Run | None = None
        self._said_paused = False

    # -- reporting -------------------------------------------------------------------------

    def refuse(self, line: int, reason: str, collapse: bool = False) -> None:
        """Record ``line`` as not produced and say so; with ``collapse`` (a delivery's
        failure: a condition of the broker, not of the record) a repeat of the reason before
        is only counted."""
        self.refused.append(line)
        if not collapse:
            print(f"strom: line {line}: not produced: {reason}", file=sys.stderr)
            return
        if self._run is not None and self._run.reason == reason:
            self._run.lines.append(line)
            return
        self._end_run()
        self._run = _Run(reason)
        print(f"strom: line {line}: not produced: {reason}", file=sys.stderr)

    def _end_run(self) -> None:
        run, self._run = self._run, None
        if run is not None and run.lines:
            print(f"strom: lines {line_ranges(run.lines)}: {len(run.lines)} more record(s) "
                  f"not produced: {run.reason}", file=sys.stderr)  # fmt: skip

    def close(self) -> None:
        """Report the repeats not reported yet."""
        self._end_run()

    # -- the producer's callbacks ----------------------------------------------------------

    def on_error(self, err: KafkaError) -> None:
        """The producer's ``error_cb``: notes when no broker answers any more."""
        if err.code() == KafkaError._ALL_BROKERS_DOWN and self.unreachable is None:
            self.unreachable = time.monotonic()
            if not self._said_paused:
                self._said_paused = True
                print(f"strom: the broker at {self.bootstrap} is unreachable: reading paused "
                      f"until it answers (records it does not acknowledge within "
                      f"{self.delivery_timeout_s:g} s are reported)", file=sys.stderr)

    def callback(self, line: int, kwargs: dict[str, Any]) -> Any:
        """The delivery callback of the record read at ``line``."""
        return functools.partial(self.on_delivery, line, kwargs)

    def on_delivery(
        self, line: int, kwargs: dict[str, Any], err: KafkaError | None, msg: Message
    ) -> None:
        if err is None:
            self.delivered += 1
            self.unreachable = None
            self.bytes += len(msg.value() or b"") + len(msg.key() or b"")
            self.partitions[msg.partition() or 0] += 1
            if self.verbose >= 2:
                print(f"{msg.topic()} [{msg.partition()}] @ {msg.offset()}", file=sys.stderr)
        elif err.code() in TOO_LARGE and not self.retrying:
            self.retry.append((line, kwargs))
        else:
            self.refuse(line, self.reason(err), collapse=True)

    def reason(self, err: KafkaError) -> str:
        """Why a record was not delivered, in words: no answer is not a refusal."""
        if err.code() in NO_ANSWER:
            if self.unreachable is not None:
                self.gave_up = True
                return (f"the broker at {self.bootstrap} is unreachable (no acknowledgement "
                        f"within {self.delivery_timeout_s:g} s)")
            return (f"not acknowledged within {self.delivery_timeout_s:g} s "
                    f"({describe_kafka_error(err)})")
        if err.code() < 0:  # librdkafka's own (local) errors
            return f"the client gave up on it: {describe_kafka_error(err)}"
        return f"the broker refused it: {describe_kafka_error(err)}"
