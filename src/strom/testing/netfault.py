"""Real network partitions on one machine with nftables (tests run as root).

A :class:`NetworkFault` owns one nftables table, ``inet strom_test_<pid>_<n>``, with one chain
on the ``input`` hook. Each :meth:`NetworkFault.drop` adds two rules (one per direction) that
drop, with a counter, the TCP/IP packets between two :class:`Endpoint`\\ s; :meth:`heal`
removes the rules (the table stays, so the fault can strike again); :meth:`close` deletes the
table. The table is always deleted: by the context manager, by an ``atexit`` hook if the test
process ends early, and, for a test process killed outright, by :func:`cleanup_stale` when the
next fault starts (it deletes ``strom_test_*`` tables whose creating PID is gone, never another
live process's table).

Packets are dropped on arrival (input hook), not on departure: the sender sees no error, its
data is retransmitted and connects time out, as across a cut cable. A dropped packet counts in
the rule's counter, so a test asserts the fault struck (:meth:`dropped`).

Addresses on loopback: a connection to 127.0.0.3 leaves from 127.0.0.1 unless the socket is
bound to a source address first, whatever address the connecting program listens on. Brokers
bind their outgoing connections to their own listener host (``BrokerConnection(source_host=…)``),
so a rule can match on the two brokers' addresses. Clients (and anything that does not bind)
come from 127.0.0.1: match them by the server's address and port instead
(``Endpoint("127.0.0.2", 9092)`` against ``Endpoint("127.0.0.1")``).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

TABLE_PREFIX = "strom_test_"
_TABLE_RE = re.compile(rf"^{TABLE_PREFIX}(\d+)_\d+$")
_counter = itertools.count(1)
_live: dict[str, NetworkFault] = {}


class NetFaultError(RuntimeError):
    """nft refused a command (its stderr is the message)."""


@dataclass(frozen=True)
class Endpoint:
    """One side of a cut: an IPv4 address, a TCP port, or both (``None`` matches any)."""

    host: str | None = None
    port: int | None = None

    def __post_init__(self) -> None:
        if self.host is None and self.port is None:
            raise ValueError("an endpoint needs a host, a port or both")

    def match(self, side: str) -> list[str]:
        """nft match expressions for this endpoint as the packet's ``saddr``/``daddr`` side."""
        terms = []
        if self.host is not None:
            terms.append(f"ip {side}addr {self.host}")
        if self.port is not None:
            terms.append(f"tcp {'s' if side == 's' else 'd'}port {int(self.port)}")
        return terms

    def __str__(self) -> str:
        return f"{self.host or '*'}:{self.port if self.port is not None else '*'}"


def nft_path() -> str | None:
    """The nft binary (often in /usr/sbin, off a normal user's PATH), or None."""
    return shutil.which("nft") or next(
        (p for p in ("/usr/sbin/nft", "/sbin/nft") if os.access(p, os.X_OK)), None
    )


def available() -> str | None:
    """None when faults can be injected here; otherwise why not (a skip reason)."""
    if os.geteuid() != 0:
        return "network faults need root (nftables)"
    if nft_path() is None:
        return "nft not found (apt-get install -y nftables)"
    probe = subprocess.run(
        [str(nft_path()), "list", "tables"], capture_output=True, text=True, timeout=10
    )
    if probe.returncode != 0:
        return f"nft cannot list tables: {probe.stderr.strip()}"
    return None


def _nft(*args: str, script: str | None = None) -> str:
    binary = nft_path()
    if binary is None:
        raise NetFaultError("nft not found (apt-get install -y nftables)")
    cmd = [binary, *args] if script is None else [binary, "-f", "-"]
    proc = subprocess.run(cmd, input=script, capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        raise NetFaultError(f"nft {' '.join(args) or '-f -'}: {proc.stderr.strip()}")
    return proc.stdout


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale() -> list[str]:
    """Delete the ``strom_test_*`` tables left by test processes that no longer exist."""
    document = json.loads(_nft("-j", "list", "tables") or '{"nftables": []}')
    deleted = []
    for item in document.get("nftables", []):
        table = item.get("table")
        if not table:
            continue
        m = _TABLE_RE.match(table.get("name", ""))
        if m and not _pid_alive(int(m.group(1))):
            _nft("delete", "table", table["family"], table["name"])
            deleted.append(table["name"])
    return deleted


class NetworkFault:
    """One nftables table of drop rules, created by :meth:`start`, deleted by :meth:`close`::

        with NetworkFault() as fault:
            fault.drop(Endpoint("127.0.0.2"), Endpoint("127.0.0.3"))   # both directions
            ...                                                         # the cut holds
            assert fault.dropped() > 0
            fault.heal()
    """

    def __init__(self) -> None:
        self.name = f"{TABLE_PREFIX}{os.getpid()}_{next(_counter)}"
        self.cuts: list[tuple[Endpoint, Endpoint]] = []
        self._healed_drops = 0
        self._started = False

    def start(self) -> Self:
        if self._started:
            return self
        cleanup_stale()
        _nft(script=(
            f"add table inet {self.name}\n"
            f"add chain inet {self.name} cut "
            "{ type filter hook input priority -10 ; policy accept ; }\n"
        ))  # fmt: skip
        self._started = True
        _live[self.name] = self
        return self

    def drop(self, a: Endpoint, b: Endpoint) -> None:
        """Drop the packets from ``a`` to ``b`` and from ``b`` to ``a`` until :meth:`heal`."""
        self.start()
        lines = []
        for src, dst in ((a, b), (b, a)):
            terms = " ".join(src.match("s") + dst.match("d"))
            if src.port is not None or dst.port is not None:
                terms = f"meta l4proto tcp {terms}"
            lines.append(
                f'add rule inet {self.name} cut {terms} counter drop comment "{src} > {dst}"\n'
            )
        _nft(script="".join(lines))
        self.cuts.append((a, b))

    def isolate(self, hosts: Iterable[str | Endpoint], others: Iterable[str | Endpoint]) -> None:
        """Cut every one of ``hosts`` from every one of ``others`` (both directions)."""
        targets = [o if isinstance(o, Endpoint) else Endpoint(o) for o in others]
        for h in hosts:
            ep = h if isinstance(h, Endpoint) else Endpoint(h)
            for o in targets:
                self.drop(ep, o)

    def counters(self) -> dict[str, int]:
        """Packets dropped so far by each rule (named ``src > dst``) since the last heal."""
        if not self._started:
            return {}
        document: dict[str, Any] = json.loads(_nft("-j", "list", "table", "inet", self.name))
        result: dict[str, int] = {}
        for item in document.get("nftables", []):
            rule = item.get("rule")
            if not rule:
                continue
            packets = sum(
                int(e["counter"]["packets"]) for e in rule.get("expr", []) if "counter" in e
            )
            name = rule.get("comment", f"rule {rule.get('handle')}")
            result[name] = result.get(name, 0) + packets
        return result

    def dropped(self) -> int:
        """Packets dropped in all (including by rules already healed)."""
        return self._healed_drops + sum(self.counters().values())

    def heal(self) -> None:
        """Remove every rule: traffic passes again (the table stays for the next cut)."""
        if not self._started:
            return
        self._healed_drops += sum(self.counters().values())
        _nft("flush", "chain", "inet", self.name, "cut")
        self.cuts.clear()

    def close(self) -> None:
        """Delete the table (idempotent)."""
        if not self._started:
            return
        self._started = False
        _live.pop(self.name, None)
        with contextlib.suppress(NetFaultError):  # already gone (deleted by hand)
            _nft("delete", "table", "inet", self.name)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    for fault in list(_live.values()):
        fault.close()
