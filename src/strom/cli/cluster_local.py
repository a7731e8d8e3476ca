"""``strom cluster up|down|stop|start|restart``: a local development cluster in the background.

``up`` starts a ZooKeeper (Debian's ``zookeeper`` package, through
:class:`strom.testing.zookeeper.ZooKeeperProcess`) unless ``--zookeeper`` names one, then
``--brokers N`` brokers with ids 1..N on ``--host`` (127.0.0.1) and ports ``--base-port``,
``--base-port``+1, …, each with its admin listener (``/metrics``, ``/health/*``) on
127.0.0.1:``--admin-base-port``+i-1 (default 9645, 9646, …: beside, not on, a single
broker's default 9644), each in ``<data-dir>/broker-<id>/`` with its log in
``<data-dir>/broker-<id>.log``. Each process runs in a session of its own, so it outlives the
terminal. What was started, and how to start each broker again, is recorded in
``<data-dir>/cluster.json``::

    {"version": 1, "zookeeper": "127.0.0.1:2181", "bootstrap": "127.0.0.1:9092,…",
     "host": "127.0.0.1", "settings": {"zookeeper.connect": "…", …},
     "processes": [{"role": "zookeeper"|"broker", "id": 1, "pid": 1234,
                    "start_time": <clock ticks since boot, /proc/<pid>/stat field 22>,
                    "address": "127.0.0.1:9092", "admin": "127.0.0.1:9645"}, …]}

Every broker also keeps ``strom.pid`` in its data dir while it runs (:mod:`strom.pidfile`,
written by ``strom serve`` itself), so a broker is found however it was started, by ``up``,
``start`` or by hand. ``stop --broker N`` stops one broker, ``start --broker N`` starts it
again as ``up`` did (same ports, settings and data), ``restart --broker N`` does both.
``down`` stops every broker of the data dir (those recorded and those whose ``strom.pid`` is
there) and then the ZooKeeper ``up`` started. ``up --security`` makes a CA and certificates
and gives every broker one mTLS listener (:mod:`strom.cli.cluster_tls`; recorded as
``"tls"`` in ``cluster.json``, so ``start`` does the same). A PID counts as the recorded process only while
its start time still matches (a PID reused by another program since is left alone). Brokers
get SIGTERM (a controlled shutdown) and SIGKILL after ``--stop-timeout``.
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

from strom import pidfile
from strom.cli import cluster_tls
from strom.cli.errors import CliError
from strom.cli.options import add_format_option
from strom.cli.output import print_json

STATE_FILE = "cluster.json"
DEFAULT_DATA_DIR = "./strom-cluster"
#: the admin listener of broker 1 (broker i: +i-1); 9644 stays free for a single broker
DEFAULT_ADMIN_BASE_PORT = 9645
start_time = pidfile.start_time


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``cluster up|down|stop|start|restart`` (without the client options: here
    ``--brokers`` is a count, not the bootstrap servers' alias)."""
    p = sub.add_parser("up", help="start a local cluster in the background")
    p.add_argument("--brokers", type=int, default=3, metavar="N", help="brokers (default 3)")
    p.add_argument("--zookeeper", metavar="CONNECT",
                   help="use this ZooKeeper (default: start one from the zookeeper package)")
    p.add_argument("--base-port", type=int, default=9092, metavar="PORT",
                   help="port of broker 1; broker i listens on PORT+i-1 (default 9092)")
    p.add_argument("--admin-base-port", type=int, default=DEFAULT_ADMIN_BASE_PORT,
                   metavar="PORT",
                   help="admin listener (/metrics, /health) of broker 1 on 127.0.0.1; broker i "
                        f"on PORT+i-1 (default {DEFAULT_ADMIN_BASE_PORT})")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    _data_dir(p, "where the brokers and ZooKeeper keep data")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="broker property for every broker (repeatable)")
    p.add_argument("--security", action="store_true",
                   help="a secured cluster: its own CA in <data-dir>/tls, one SSL listener per "
                        "broker with client certificates required (also between brokers)")
    add_format_option(p)
    p.set_defaults(func=up)
    p = sub.add_parser("down", help="stop every broker of the data dir, then its ZooKeeper")
    _data_dir(p)
    _stop_timeout(p)
    p.set_defaults(func=down)
    for name, func, text in (
        ("stop", stop, "stop one broker of the local cluster"),
        ("start", start, "start one broker of the local cluster again (as 'up' did)"),
        ("restart", restart, "stop, then start, one broker of the local cluster"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--broker", type=int, required=True, metavar="N", help="the broker id")
        _data_dir(p)
        if name != "start":
            _stop_timeout(p)
        add_format_option(p)
        p.set_defaults(func=func)


def _data_dir(p: argparse.ArgumentParser, text: str = "the data dir given to 'cluster up'"
              ) -> None:  # fmt: skip
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help=f"{text} (default {DEFAULT_DATA_DIR})")


def _stop_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stop-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="wait this long for a clean shutdown before SIGKILL (default 30)")


# -- the record ------------------------------------------------------------------------------


def _is_ours(entry: dict[str, Any]) -> bool:
    return pidfile.is_running(int(entry["pid"]), entry.get("start_time"))


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


def _check_free(host: str, port: int, flag: str) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise CliError(f"cannot use {host}:{port}: {exc.strerror or exc} "
                           f"(choose other ports with {flag})") from None  # fmt: skip


def _entry(role: str, ident: int, pid: int, address: str, admin: str | None = None
           ) -> dict[str, Any]:  # fmt: skip
    entry = {"role": role, "id": ident, "pid": pid, "start_time": start_time(pid),
             "address": address}  # fmt: skip
    if admin is not None:
        entry["admin"] = admin
    return entry


def _broker_entry(state: dict[str, Any], broker_id: int) -> dict[str, Any] | None:
    return next((e for e in state.get("processes", [])
                 if e["role"] == "broker" and e["id"] == broker_id), None)  # fmt: skip


def _running_brokers(data_dir: Path, state: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    """Every running broker of ``data_dir`` by id: the recorded ones and those whose
    ``strom.pid`` is in ``broker-<id>/`` (started by hand too), each as a process entry."""
    found: dict[int, dict[str, Any]] = {}
    for e in (state or {}).get("processes", []):
        if e["role"] == "broker" and _is_ours(e):
            found[int(e["id"])] = e
    for path in sorted(data_dir.glob(f"broker-*/{pidfile.FILE_NAME}")):
        doc = pidfile.read(path)
        ident = path.parent.name.removeprefix("broker-")
        if doc is None or not ident.isdigit() or not _is_ours(doc):
            continue
        found.setdefault(int(ident), {"role": "broker", "id": int(ident), "pid": doc["pid"],
                                      "start_time": doc.get("start_time"),
                                      "address": doc.get("listen")})  # fmt: skip
    return found


# -- up --------------------------------------------------------------------------------------


def _process_kit() -> Any:
    """strom's process kit (``strom.testing``: the broker and ZooKeeper processes), imported
    by these commands only (every ``strom`` command imports this module)."""
    from strom.testing import process, zookeeper  # the process kit: only these commands

    return process, zookeeper


def _broker_process(data_dir: Path, state: dict[str, Any], entry: dict[str, Any]) -> Any:
    BrokerProcess = _process_kit()[0].BrokerProcess  # noqa: N806 - the class
    broker_id = int(entry["id"])
    port = int(str(entry["address"]).rpartition(":")[2])
    admin = entry.get("admin")
    host = state.get("host", "127.0.0.1")
    settings = dict(state["settings"])
    if state.get("tls"):  # --security: the listener and TLS first, --set over them
        settings = {**cluster_tls.broker_settings(state["tls"], host, port), **settings}
    proc = BrokerProcess(
        data_dir / f"broker-{broker_id}", port=port, host=host,
        broker_id=broker_id, settings=settings,
        admin_port=int(str(admin).rpartition(":")[2]) if admin else None,
        log_file=data_dir / f"broker-{broker_id}.log",
    )  # fmt: skip
    proc.detach = True
    return proc


def up(args: argparse.Namespace) -> int:
    """Start ZooKeeper (unless given) and the brokers; print the bootstrap servers."""
    if args.brokers < 1:
        raise CliError("--brokers must be at least 1")
    data_dir = Path(args.data_dir).absolute()
    old = _load(data_dir)
    if (old is not None and any(_is_ours(e) for e in old.get("processes", []))) or (
            _running_brokers(data_dir, None)):
        raise CliError(f"a cluster started from {data_dir} is still running "
                       f"(strom cluster down --data-dir {args.data_dir})")  # fmt: skip
    ports = [args.base_port + i for i in range(args.brokers)]
    admin_ports = [args.admin_base_port + i for i in range(args.brokers)]
    for flag, chosen in (("--base-port", ports), ("--admin-base-port", admin_ports)):
        if chosen[-1] > 65535 or chosen[0] < 1:
            raise CliError(f"{flag} {chosen[0]}: ports must lie within 1..65535")
    if set(ports) & set(admin_ports):
        raise CliError("--base-port and --admin-base-port ranges overlap")
    for port in ports:
        _check_free(args.host, port, "--base-port")
    for port in admin_ports:
        _check_free("127.0.0.1", port, "--admin-base-port")
    data_dir.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {"version": 1, "zookeeper": args.zookeeper, "bootstrap": "",
                             "host": args.host, "settings": {}, "processes": []}  # fmt: skip
    try:
        if args.zookeeper is None:
            state["zookeeper"] = _start_zookeeper(data_dir, state)
        settings = {"zookeeper.connect": state["zookeeper"]}
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CliError(f"invalid --set {item!r}: expected KEY=VALUE")
            settings[key] = value
        state["settings"] = settings
        if args.security:
            state["tls"] = cluster_tls.make_files(data_dir / "tls", args.host)
        planned: list[dict[str, Any]] = [{"role": "broker", "id": i, "address": f"{args.host}:{port}",
                    "admin": f"127.0.0.1:{admin}"}
                   for i, (port, admin) in enumerate(zip(ports, admin_ports, strict=True), 1)]
        brokers = [_broker_process(data_dir, state, e) for e in planned]
        with ThreadPoolExecutor(len(brokers)) as pool:
            futures = [pool.submit(_start, b) for b in brokers]
            errors = [f.exception() for f in futures]
        for entry, broker in zip(planned, brokers, strict=True):
            if broker.pid is not None:
                state["processes"].append(_entry("broker", entry["id"], broker.pid,
                                                 entry["address"], entry["admin"]))
        _save(data_dir, state)
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise CliError(f"a broker did not start: {str(failed).splitlines()[0]}")
    except BaseException:
        _save(data_dir, state)
        _stop_all(state, data_dir, 10.0)
        (data_dir / STATE_FILE).unlink(missing_ok=True)
        raise
    state["bootstrap"] = ",".join(b.bootstrap for b in brokers)
    _save(data_dir, state)
    if getattr(args, "format", "text") == "json":
        print_json([state])
        return 0
    for entry in state["processes"]:
        if entry["role"] == "zookeeper":
            print(f"Started ZooKeeper at {entry['address']} (pid {entry['pid']})")
        else:
            print(f"Started broker {entry['id']} at {entry['address']} (pid {entry['pid']}), "
                  f"metrics and health on http://{entry['admin']}")  # fmt: skip
    print(f"ZooKeeper: {state['zookeeper']}")
    print(f"Bootstrap servers: {state['bootstrap']}")
    if state.get("tls"):
        x = " ".join(f"-X {k}={v}" for k, v in cluster_tls.client_settings(state["tls"]).items())
        print(f"TLS: SSL listeners, client certificates required; CA {state['tls']['ca']}, "
              f"client settings in {state['tls']['client_properties']}")
        print(f"Try: strom profile create local-tls -b {state['bootstrap']} {x}")
    print("Metrics: " + ",".join(f"http://{e['admin']}/metrics" for e in state["processes"]
                                  if e["role"] == "broker"))  # fmt: skip
    return 0


def _start(broker: Any) -> None:
    broker.start(60.0)


def _start_zookeeper(data_dir: Path, state: dict[str, Any]) -> str:
    try:
        zookeeper = _process_kit()[1]
    except ImportError as exc:
        raise CliError(f"cannot start ZooKeeper in this build: {exc}") from None
    if not zookeeper.zookeeper_available():
        raise CliError("ZooKeeper is not installed: apt-get install -y zookeeper "
                       "(or give --zookeeper HOST:PORT)")  # fmt: skip
    zk = zookeeper.ZooKeeperProcess(data_dir / "zookeeper")
    zk.detach = True
    try:
        zk.start(60.0)
    except RuntimeError as exc:
        raise CliError(f"ZooKeeper did not start: {str(exc).splitlines()[0]}") from None
    assert zk.pid is not None
    state["processes"].append(_entry("zookeeper", 0, zk.pid, zk.connect_string))
    _save(data_dir, state)
    return str(zk.connect_string)


# -- stopping --------------------------------------------------------------------------------


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


def _stop(entries: list[dict[str, Any]], timeout: float) -> list[str]:
    """SIGTERM ``entries``, SIGKILL those still running after ``timeout``; a line each."""
    running = [e for e in entries if _is_ours(e)]
    for e in running:
        _signal(e, signal.SIGTERM)
    stubborn = _wait_gone(running, timeout)
    for e in stubborn:
        _signal(e, signal.SIGKILL)
    _wait_gone(stubborn, 10.0)
    lines = []
    for e in entries:
        name = "ZooKeeper" if e["role"] == "zookeeper" else f"broker {e['id']}"
        how = ("was not running" if e not in running
               else "killed (SIGKILL)" if e in stubborn else "stopped")  # fmt: skip
        lines.append(f"{name} (pid {e['pid']}) {how}")
    return lines


def _stop_all(state: dict[str, Any] | None, data_dir: Path, timeout: float) -> list[str]:
    """Every broker of ``data_dir`` (recorded, or found by its ``strom.pid``), then the
    recorded ZooKeeper."""
    recorded = [e for e in (state or {}).get("processes", []) if e["role"] == "broker"]
    running = _running_brokers(data_dir, state)
    brokers = [running.get(int(e["id"]), e) for e in recorded]
    brokers += [e for i, e in sorted(running.items()) if i not in {int(r["id"]) for r in recorded}]
    zookeeper = [e for e in (state or {}).get("processes", []) if e["role"] == "zookeeper"]
    return _stop(brokers, timeout) + _stop(zookeeper, timeout)


def down(args: argparse.Namespace) -> int:
    """Stop every broker of the data dir, then the ZooKeeper ``up`` started."""
    data_dir = Path(args.data_dir).absolute()
    state = _load(data_dir)
    if state is None and not _running_brokers(data_dir, None):
        raise CliError(f"no cluster was started from {data_dir} ({STATE_FILE} not found)")
    for line in _stop_all(state, data_dir, args.stop_timeout):
        print(line)
    (data_dir / STATE_FILE).unlink(missing_ok=True)
    return 0


# -- one broker ------------------------------------------------------------------------------


def _state(data_dir: Path) -> dict[str, Any]:
    state = _load(data_dir)
    if state is None:
        raise CliError(f"no cluster was started from {data_dir} ({STATE_FILE} not found)")
    return state


def _one(args: argparse.Namespace, done: str, entry: dict[str, Any]) -> int:
    if args.format == "json":
        print_json([{"broker": entry["id"], "result": done, "pid": entry["pid"],
                     "address": entry.get("address"), "admin": entry.get("admin")}])
    else:
        admin = f", metrics and health on http://{entry['admin']}" if entry.get("admin") else ""
        print(f"broker {entry['id']} (pid {entry['pid']}) {done} at {entry.get('address')}"
              f"{admin}")  # fmt: skip
    return 0


def stop(args: argparse.Namespace) -> int:
    """Stop broker ``--broker`` of the data dir, however it was started."""
    data_dir = Path(args.data_dir).absolute()
    state = _load(data_dir)
    running = _running_brokers(data_dir, state).get(args.broker)
    if running is None:
        if state is None or _broker_entry(state, args.broker) is None:
            raise CliError(f"broker {args.broker} is not part of the cluster in {data_dir}")
        raise CliError(f"broker {args.broker} is not running")
    [line] = _stop([running], args.stop_timeout)
    if args.format == "json":
        print_json([{"broker": args.broker, "result": line.rpartition(") ")[2],
                     "pid": running["pid"]}])  # fmt: skip
    else:
        print(line)
    return 0


def start(args: argparse.Namespace) -> int:
    """Start broker ``--broker`` again as ``up`` started it (ports, settings, data)."""
    data_dir = Path(args.data_dir).absolute()
    state = _state(data_dir)
    entry = _broker_entry(state, args.broker)
    if entry is None:
        known = ",".join(str(e["id"]) for e in state["processes"] if e["role"] == "broker")
        raise CliError(f"broker {args.broker} is not part of the cluster in {data_dir} "
                       f"(brokers: {known})")  # fmt: skip
    running = _running_brokers(data_dir, state).get(args.broker)
    if running is not None:
        raise CliError(f"broker {args.broker} is already running (pid {running['pid']})")
    if "settings" not in state:
        raise CliError(f"{data_dir / STATE_FILE} predates 'cluster start': run 'cluster down' "
                       "and 'cluster up' again")  # fmt: skip
    proc = _broker_process(data_dir, state, entry)
    try:
        proc.start(60.0)
    except RuntimeError as exc:
        raise CliError(f"broker {args.broker} did not start: {str(exc).splitlines()[0]}"
                       ) from None  # fmt: skip
    entry.update(_entry("broker", args.broker, proc.pid, entry["address"], entry.get("admin")))
    _save(data_dir, state)
    return _one(args, "started", entry)


def restart(args: argparse.Namespace) -> int:
    """``stop`` (if it runs), then ``start``."""
    data_dir = Path(args.data_dir).absolute()
    running = _running_brokers(data_dir, _load(data_dir)).get(args.broker)
    if running is not None:
        _stop([running], args.stop_timeout)
    return start(args)
