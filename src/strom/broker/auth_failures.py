"""A listener's failed authentications: each one counted, and logged without flooding the log.

Kafka logs every failed authentication (``Failed authentication with /<ip> (...)``) at INFO.
strom logs the same line, but a client that retries (librdkafka reconnects every second or so
with the same bad certificate or password) or guesses must not flood the broker's log: of the
failures of one (peer host, reason), the first is logged, those in the :data:`WINDOW_S`
seconds after it are only counted and summarised in one line when that time is up::

    failed authentication with 10.0.0.7 (listener SSL), 41 more time(s) in the 60 s after the one logged: SSL handshake failed: CERTIFICATE_VERIFY_FAILED

At most :data:`MAX_PEERS` (host, reason) pairs are tracked at a time; failures of further pairs
share one summary ("other peers"). So, whatever the clients do, a listener logs two lines per
window (its first failure, its summary) for at most ``MAX_PEERS + 1`` windows open at a time.
Every failure is still counted in the listener's failed-authentication metric.

The reasons: a TLS handshake refused (:mod:`strom.broker.tls_handshake`), a SASL exchange
failed (:mod:`strom.broker.sasl_connection`: the mechanism and why, the user tried included).
A TLS and SASL listener (SASL_SSL) has one :class:`AuthenticationFailures` for both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import NamedTuple

log = logging.getLogger(__name__)

#: seconds after a logged failure during which the same (peer host, reason) is only counted
WINDOW_S = 60.0
#: (peer host, reason) pairs tracked at a time; failures of others share one summary
MAX_PEERS = 100
OTHER_PEERS = ""  # the host of the pair failures beyond MAX_PEERS are counted under


class Summary(NamedTuple):
    """``times`` failures of (``host``, ``reason``) not logged one by one, in the ``window_s``
    seconds after the one that was (``host`` :data:`OTHER_PEERS`: of hosts not tracked)."""

    host: str
    reason: str
    times: int
    window_s: float


class FailureWindows:
    """The rate limit of one listener's failure lines (module doc), without I/O: the caller
    passes the time (a monotonic clock's seconds) and logs what it is told to.

    Invariant: ``windows`` maps each (host, reason) whose last logged failure is less than
    ``window_s`` old, or not yet summarised, to (the time it was logged, failures since)."""

    def __init__(self, window_s: float = WINDOW_S, max_peers: int = MAX_PEERS) -> None:
        self.window_s = window_s
        self.max_peers = max_peers
        self.windows: dict[tuple[str, str], tuple[float, int]] = {}

    def failed(self, host: str, reason: str, now: float) -> tuple[list[Summary], bool]:
        """Record a failure at ``now``: the summaries of the windows ended by then (as
        :meth:`expired`), and whether to log this failure (True: a window opened; call
        :meth:`expired` once ``window_s`` has passed) or only count it for its window's
        summary (False)."""
        ended = self.expired(now)
        key = (host, reason)
        if key not in self.windows and len(self.windows) >= self.max_peers:
            key = (OTHER_PEERS, "")
        window = self.windows.get(key)
        if window is not None:
            self.windows[key] = (window[0], window[1] + 1)
            return ended, False
        self.windows[key] = (now, 0)
        return ended, True

    def expired(self, now: float) -> list[Summary]:
        """The summaries of the windows ended by ``now`` that counted failures; every ended
        window is forgotten."""
        out = []
        for key, (opened, count) in list(self.windows.items()):
            if now >= opened + self.window_s:
                del self.windows[key]
                if count:
                    out.append(Summary(key[0], key[1], count, self.window_s))
        return out


class AuthenticationFailures:
    """One listener's failed authentications: counted by ``count`` (the listener's
    failed-authentication metric) and logged through a :class:`FailureWindows` (module doc)."""

    def __init__(self, listener: str, count: Callable[[], None],
                 limiter: FailureWindows | None = None) -> None:  # fmt: skip
        self.listener = listener
        self.count = count
        self.limiter = limiter if limiter is not None else FailureWindows()

    def failed(self, peer: tuple[str, int], reason: str, line: str) -> None:
        """A failure of ``peer`` for ``reason`` (what the window of its host groups and its
        summary names): counted; ``line`` logged unless the same (host, reason) was just now.
        Call on the event loop (a window's summary is a timer)."""
        self.count()
        loop = asyncio.get_running_loop()
        now = loop.time()
        ended, first = self.limiter.failed(peer[0], reason, now)
        self._log(ended)
        if first:
            log.info("%s", line)
            # (the loop may run a timer a clock tick early: the window's end is passed as is)
            end = now + self.limiter.window_s
            loop.call_at(end, lambda: self._log(self.limiter.expired(max(loop.time(), end))))

    def _log(self, summaries: list[Summary]) -> None:
        for s in summaries:
            if s.host == OTHER_PEERS:
                source, reason = "other peers", f"(more than {self.limiter.max_peers} at once)"
            else:
                source, reason = s.host, s.reason
            log.info("failed authentication with %s (listener %s), %d more time(s) in the %.0f s "
                     "after the one logged: %s", source, self.listener, s.times, s.window_s,
                     reason)  # fmt: skip
