"""``strom cluster up|down``: a local development cluster in the background.

``up`` starts a ZooKeeper (Debian's ``zookeeper`` package, through
:class:`strom.testing.zookeeper.ZooKeeperProcess`) unless ``--zookeeper`` names one, then
``--brokers N`` brokers with ids 1..N on ``--host`` (127.0.0.1) and ports ``--base-port``,
``--base-port``+1, …, each in ``<data-dir>/broker-<id>/`` with its log in
``<data-dir>/broker-<id>.log``. Each process runs in a session of its own, so it outlives the
terminal. The started processes are recorded in ``<data-dir>/cluster.json``::

    {"version": 1, "zookeeper": "127.0.0.1:2181", "bootstrap": "127.0.0.1:9092,…",
     "processes": [{"role": "zookeeper"|"broker", "id": 1, "pid": 1234,
                    "start_time": <clock ticks since boot, /proc/<pid>/stat field 22>,
                    "address": "127.0.0.1:9092"}, …]}

``down`` stops exactly those processes: a PID counts as ours only while its start time still
matches (a PID reused by another program since is left alone). Brokers get SIGTERM (a
controlled shutdown) and SIGKILL after ``--stop-timeout``; ZooKeeper goes last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from strom.cli.errors import CliError
from strom.cli.options import add_format_option
from strom.cli.output import print_json

STATE_FILE = "cluster.json"
DEFAULT_DATA_DIR = "./strom-cluster"


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``cluster up`` and ``cluster down`` (without the client options: here
    ``--brokers`` is a count, not the bootstrap servers' alias)."""
    p = sub.add_parser("up", help="start a local cluster in the background")
    p.add_argument("--brokers", type=int, default=3, metavar="N", help="brokers (default 3)")
    p.add_argument("--zookeeper", metavar="CONNECT",
                   help="use this ZooKeeper (default: start one from the zookeeper package)")
    p.add_argument("--base-port", type=int, default=9092, metavar="PORT",
                   help="port of broker 1; broker i listens on PORT+i-1 (default 9092)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help=f"where the brokers and ZooKeeper keep data (default {DEFAULT_DATA_DIR})")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="broker property for every broker (repeatable)")
    add_format_option(p)
    p.set_defaults(func=up)
    p = sub.add_parser("down", help="stop what 'cluster up' started")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help=f"the data dir given to 'cluster up' (default {DEFAULT_DATA_DIR})")
    p.add_argument("--stop-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="wait this long for a clean shutdown before SIGKILL (default 30)")
    p.set_defaults(func=down)


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone (or a zombie:
    exited, waiting for a parent that is not us to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _is_ours(entry: dict[str, Any]) -> bool:
    return start_time(int(entry["pid"])) == entry.get("start_time")


def _load(data_dir: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((data_dir / STATE_FILE).read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CliError(f"{data_dir / STATE_FILE}: unreadable ({exc})") from None


def recorded_zookeeper(data_dir: Path, addresses: set[str]) -> str | None:
    """The ZooKeeper recorded by ``up`` in ``data_dir`` when the cluster described is the one
    it started: one of its recorded brokers' addresses is among ``addresses`` (the
    ``host:port`` of the brokers a client sees). None when there is no (readable) record, or
    it belongs to another cluster: a stale file must not lend another cluster's epoch."""
    try:
        state = _load(data_dir)
    except CliError:
        return None
    if state is None or not state.get("zookeeper"):
        return None
    started = {str(e.get("address")) for e in state.get("processes", [])
               if e.get("role") == "broker"}  # fmt: skip
    return str(state["zookeeper"]) if started & addresses else None


def _save(data_dir: Path, state: dict[str, Any]) -> None:
    tmp = data_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(data_dir / STATE_FILE)


def _check_free(host: str, port: int) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise CliError(f"cannot use {host}:{port}: {exc.strerror or exc}") from None


def _record(state: dict[str, Any], role: str, ident: int, proc: Any, address: str) -> None:
    pid = int(proc.pid)
    state["processes"].append(
        {"role": role, "id": ident, "pid": pid, "start_time": start_time(pid), "address": address}
    )


def up(args: argparse.Namespace) -> int:
    """Start ZooKeeper (unless given) and the brokers; print the bootstrap servers."""
    from strom.testing.process import BrokerProcess

    if args.brokers < 1:
        raise CliError("--brokers must be at least 1")
    data_dir = Path(args.data_dir).absolute()
    old = _load(data_dir)
    if old is not None and any(_is_ours(e) for e in old.get("processes", [])):
        raise CliError(f"a cluster started from {data_dir} is still running "
                       f"(strom cluster down --data-dir {args.data_dir})")  # fmt: skip
    ports = [args.base_port + i for i in range(args.brokers)]
    if ports[-1] > 65535 or ports[0] < 1:
        raise CliError(f"--base-port {args.base_port}: ports must lie within 1..65535")
    for port in ports:
        _check_free(args.host, port)
    data_dir.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {"version": 1, "zookeeper": args.zookeeper, "bootstrap": "",
                             "processes": []}  # fmt: skip
    try:
        if args.zookeeper is None:
            state["zookeeper"] = _start_zookeeper(data_dir, state)
        settings = {"zookeeper.connect": state["zookeeper"]}
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CliError(f"invalid --set {item!r}: expected KEY=VALUE")
            settings[key] = value
        brokers = []
        for broker_id, port in enumerate(ports, start=1):
            broker = BrokerProcess(
                data_dir / f"broker-{broker_id}", port=port, host=args.host,
                broker_id=broker_id, settings=settings,
                log_file=data_dir / f"broker-{broker_id}.log",
            )  # fmt: skip
            broker.detach = True
            brokers.append(broker)
        with ThreadPoolExecutor(len(brokers)) as pool:
            futures = [pool.submit(_start, b) for b in brokers]
            errors = [f.exception() for f in futures]
        for broker_id, broker in enumerate(brokers, start=1):
            if broker.pid is not None:
                _record(state, "broker", broker_id, broker, broker.bootstrap)
        _save(data_dir, state)
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise CliError(f"a broker did not start: {str(failed).splitlines()[0]}")
    except BaseException:
        _save(data_dir, state)
        _stop_all(state, 10.0)
        (data_dir / STATE_FILE).unlink(missing_ok=True)
        raise
    state["bootstrap"] = ",".join(b.bootstrap for b in brokers)
    _save(data_dir, state)
    if getattr(args, "format", "text") == "json":
        print_json([state])
        return 0
    for entry in state["processes"]:
        name = "ZooKeeper" if entry["role"] == "zookeeper" else f"broker {entry['id']}"
        print(f"Started {name} at {entry['address']} (pid {entry['pid']})")
    print(f"ZooKeeper: {state['zookeeper']}")
    print(f"Bootstrap servers: {state['bootstrap']}")
    return 0


def _start(broker: Any) -> None:
    broker.start(60.0)


def _start_zookeeper(data_dir: Path, state: dict[str, Any]) -> str:
    try:
        from strom.testing.zookeeper import ZooKeeperProcess, zookeeper_available
    except ImportError as exc:
        raise CliError(f"cannot start ZooKeeper in this build: {exc}") from None
    if not zookeeper_available():
        raise CliError("ZooKeeper is not installed: apt-get install -y zookeeper "
                       "(or give --zookeeper HOST:PORT)")  # fmt: skip
    zk = ZooKeeperProcess(data_dir / "zookeeper")
    zk.detach = True
    try:
        zk.start(60.0)
    except RuntimeError as exc:
        raise CliError(f"ZooKeeper did not start: {str(exc).splitlines()[0]}") from None
    _record(state, "zookeeper", 0, zk, zk.connect_string)
    _save(data_dir, state)
    return str(zk.connect_string)


def _signal(entry: dict[str, Any], sig: int) -> None:
    if _is_ours(entry):
        with contextlib.suppress(ProcessLookupError):  # exited just now
            os.kill(int(entry["pid"]), sig)


def _wait_gone(entries: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    """The entries still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    left = [e for e in entries if _is_ours(e)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [e for e in left if _is_ours(e)]
    return left


def _stop_all(state: dict[str, Any], timeout: float) -> list[str]:
    """SIGTERM the brokers, SIGKILL those still running after ``timeout``, then ZooKeeper."""
    lines = []
    entries = state.get("processes", [])
    for role in ("broker", "zookeeper"):
        group = [e for e in entries if e["role"] == role]
        running = [e for e in group if _is_ours(e)]
        for e in running:
            _signal(e, signal.SIGTERM)
        stubborn = _wait_gone(running, timeout)
        for e in stubborn:
            _signal(e, signal.SIGKILL)
        _wait_gone(stubborn, 10.0)
        for e in group:
            name = "ZooKeeper" if role == "zookeeper" else f"broker {e['id']}"
            how = ("was not running" if e not in running
                   else "killed (SIGKILL)" if e in stubborn else "stopped")  # fmt: skip
            lines.append(f"{name} (pid {e['pid']}) {how}")
    return lines


def down(args: argparse.Namespace) -> int:
    """Stop the processes ``cluster up`` recorded in the data dir."""
    data_dir = Path(args.data_dir).absolute()
    state = _load(data_dir)
    if state is None:
        raise CliError(f"no cluster was started from {data_dir} ({STATE_FILE} not found)")
    for line in _stop_all(state, args.stop_timeout):
        print(line)
    (data_dir / STATE_FILE).unlink(missing_ok=True)
    return 0
