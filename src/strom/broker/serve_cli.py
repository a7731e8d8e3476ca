"""``strom serve``: run one broker in the foreground until Ctrl-C or SIGTERM.

Everything that can be checked before the broker touches the disk is checked first, each
failure one line on stderr and a non-zero exit: the settings (unknown keys are warned about,
or refused with ``--strict``), the listen address (the port must be free, so a second broker
on the same port creates nothing), and the data directory (it must not be a file). Errors
while loading the data directory name the file they come from. While it runs, the data
directory holds ``strom.pid`` (:mod:`strom.pidfile`), so ``strom cluster stop|down`` find it
however it was started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import resource
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from strom import pidfile
from strom.broker.password_encoder import encoders_from_config
from strom.config import BrokerConfig, ConfigError
from strom.replication.replica_selector import check_selector
from strom.security.acl import authorizer_from_config
from strom.security.listeners import ListenerConfigError, Listeners
from strom.security.listeners import from_config as listeners_from_config
from strom.security.sasl import SaslConfigError, SaslSettings
from strom.security.sasl import client as sasl_client
from strom.security.tls import TlsConfigError, client_context, server_context

log = logging.getLogger("strom")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
METADATA_FILE = "strom-metadata.json"


def parse_host_port(text: str, flag: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{flag} expects HOST:PORT, got {text!r}")
    return (host or "0.0.0.0").strip("[]"), int(port)


def _level(text: str) -> str:
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"invalid level {text!r}: one of {', '.join(LOG_LEVELS)}")
    return level


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        default="./strom-data",
        help="where logs and metadata live (default ./strom-data)",
    )
    parser.add_argument(
        "--listen",
        default=None,
        help="HOST:PORT of one PLAINTEXT listener (default: the property listeners, else "
        "127.0.0.1:9092)",
    )
    parser.add_argument(
        "--advertised-listener",
        help="HOST:PORT clients are told to connect to (default: --listen; with several "
        "listeners use the property advertised.listeners)",
    )
    parser.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[,HOST:PORT...][/CHROOT]",
        help="join a cluster coordinated by this ZooKeeper (sets zookeeper.connect)",
    )
    parser.add_argument(
        "--broker-id", type=int, metavar="N", help="this broker's id in the cluster (broker.id)"
    )
    parser.add_argument(
        "--admin-listener",
        metavar="HOST:PORT",
        help="where /metrics, /health/live and /health/ready are served (property "
        "strom.admin.listener, default 127.0.0.1:9644); an empty value turns it off",
    )
    parser.add_argument(
        "--config", type=Path, help="a properties file with Kafka broker property names"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one broker property (repeatable)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse unknown property names (default: warn and ignore them)",
    )
    parser.add_argument(
        "--log-level",
        type=_level,
        default=None,
        metavar="LEVEL",
        help="DEBUG, INFO (default), WARNING or ERROR; -v is DEBUG",
    )


def _flag_settings(args: argparse.Namespace) -> list[str]:
    """``--zookeeper`` and ``--broker-id`` as the properties they stand for."""
    sets = []
    if getattr(args, "zookeeper", None):
        sets.append(f"zookeeper.connect={args.zookeeper}")
    if getattr(args, "broker_id", None) is not None:
        sets.append(f"broker.id={args.broker_id}")
    return sets


def _setup_logging(args: argparse.Namespace) -> None:
    level = args.log_level or ("DEBUG" if getattr(args, "verbose", 0) else "INFO")
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,  # the CLI entry point may have configured logging for client commands
    )
    logging.getLogger("asyncio").setLevel(max(logging.INFO, getattr(logging, level)))


def _check_unknown(config: BrokerConfig, strict: bool) -> None:
    unknown = config.unknown()
    for key, suggestion in unknown:
        hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
        if strict:
            raise ConfigError(f"unknown property {key!r}{hint}; refused by --strict")
        log.warning("unknown property %r ignored%s", key, hint)


def _check_data_dir(data_dir: Path) -> None:
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"--data-dir {data_dir} is a file, not a directory")
    for parent in data_dir.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"--data-dir {data_dir}: {parent} is a file, not a directory")
            break


def _check_port(host: str, port: int, flag: str = "--listen") -> None:
    """Bind (and release) the listen address as the server will, before creating anything."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(
            f"{flag} {host}:{port}: cannot resolve {host!r} ({exc.strerror})"
        ) from None
    for family, kind, proto, _name, sockaddr in infos[:1]:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(sockaddr)
            except OSError as exc:
                where = f"{host}:{port}" if flag == "--listen" else f"{flag} {host}:{port}"
                raise ConfigError(f"cannot listen on {where}: {exc.strerror or exc}") from None


def _listeners(config: BrokerConfig, args: argparse.Namespace) -> Listeners:
    """The listeners: ``--listen`` / ``--advertised-listener`` (one PLAINTEXT listener, a
    wildcard advertised as localhost) or the properties (:mod:`strom.security.listeners`)."""
    listen = advertised = None
    if args.listen:
        host, port = parse_host_port(args.listen, "--listen")
        listen = f"[{host}]:{port}"
    if args.advertised_listener:
        host, port = parse_host_port(args.advertised_listener, "--advertised-listener")
        advertised = f"[{host}]:{port}"
    try:
        listeners = listeners_from_config(config.values, listen, advertised)
        for spec in listeners.bound:  # key and trust stores read before anything starts
            if spec.uses_tls:
                server_context(spec)
            if spec.uses_sasl:  # and SASL settings: a mistake names its property
                SaslSettings.from_config(config.values, spec.name)
        inter = listeners.inter_broker_listener
        if inter.uses_tls:
            client_context(inter)
        if inter.uses_sasl:
            sasl_client.credentials(config.values, inter.name,
                                    listeners.inter_broker_sasl_mechanism)  # fmt: skip
    except (ListenerConfigError, TlsConfigError, SaslConfigError) as exc:
        raise ConfigError(str(exc)) from None
    return listeners


def run(args: argparse.Namespace) -> int:
    _setup_logging(args)
    data_dir = Path(args.data_dir)
    from strom.broker.observability import admin  # not at import: `strom --help` imports this

    sets = list(args.set)
    if args.admin_listener is not None:
        sets.append(f"{admin.CONFIG_KEY}={args.admin_listener}")
    try:
        config = BrokerConfig.load(args.config, [*sets, *_flag_settings(args)])
        _check_unknown(config, args.strict)
        listeners = _listeners(config, args)
        _check_data_dir(data_dir)
        encoders_from_config(config.values)  # password.encoder.*: checked before anything starts
        try:
            check_selector(config.get("replica.selector.class"))
            authorizer_from_config(config.get("authorizer.class.name"), config.get("super.users"),
                                   config.get("allow.everyone.if.no.acl.found"))  # fmt: skip
        except ValueError as exc:  # AclError too
            raise ConfigError(str(exc)) from None
        flag = "--listen" if args.listen else "listeners"
        for spec in listeners.bound:
            _check_port(spec.host, spec.port, flag if flag == "--listen" else spec.name)
        admin_address = admin.parse_listener(config.get(admin.CONFIG_KEY) or "")
        if admin_address is not None:
            for spec in listeners.bound:
                if admin_address[1] == spec.port and admin_address[0] == spec.host:
                    raise ConfigError(f"{admin.CONFIG_KEY} and listener {spec.name} are the "
                                      "same address")
            if admin.CONFIG_KEY in config.explicit:  # asked for: a busy port is an error
                try:
                    _check_port(*admin_address, flag=admin.CONFIG_KEY)
                except ConfigError as exc:
                    raise ConfigError(f"{exc} ({admin.HINT})") from None
            # the default: a busy port only costs the listener (AdminListener warns, once)
    except ConfigError as exc:
        print(f"strom serve: {exc}", file=sys.stderr)
        return 2
    for key, value in sorted(config.explicit.items()):
        secret = "password" in key or key.endswith(("ssl.keystore.key", "sasl.jaas.config"))
        log.debug("property %s=%s", key, "[hidden]" if secret else value)
    from strom.storage.file_handles import raise_nofile_limit  # storage: only to serve

    before = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    nofile = raise_nofile_limit()  # segment files and sockets: as many as the OS lets us
    if nofile != before:
        log.info("raised the open-file limit from %d to %d", before, nofile)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:  # strom.pid: how 'strom cluster stop|down' find this broker, however it was started
        data_dir.mkdir(parents=True, exist_ok=True)
        first = listeners.bound[0]
        pid_file: Path | None = pidfile.write(data_dir, listen=f"{first.host}:{first.port}",
                                              admin=config.get(admin.CONFIG_KEY) or "")
    except OSError:
        pid_file = None  # the broker's start-up says what is wrong with the data dir
    try:
        return asyncio.run(_serve(config, data_dir, listeners))
    except KeyboardInterrupt:
        return 0
    finally:
        if pid_file is not None:
            pidfile.remove(pid_file)


def describe_start_error(exc: BaseException, data_dir: Path) -> str:
    """One line for a start-up failure, naming the file when the data directory is at fault."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{data_dir / METADATA_FILE}: not valid JSON ({exc})"
    if isinstance(exc, (KeyError, TypeError)) and (data_dir / METADATA_FILE).exists():
        return f"{data_dir / METADATA_FILE}: unexpected content ({type(exc).__name__}: {exc})"
    if isinstance(exc, IsADirectoryError | NotADirectoryError | PermissionError) and (
        exc.filename
    ):
        return f"{exc.filename}: {exc.strerror}"
    return str(exc) or type(exc).__name__


def _on_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A client that hangs up is one line, not an ERROR with a traceback."""
    exc = context.get("exception")
    if isinstance(exc, BrokenPipeError | ConnectionResetError):
        log.info("client hung up: %s", exc.strerror or type(exc).__name__)
        return
    loop.default_exception_handler(context)


async def _serve(config: BrokerConfig, data_dir: Path, listeners: Listeners) -> int:
    from strom.broker.assembly import Broker  # the whole broker: only to serve

    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_on_loop_error)
    try:
        broker = Broker(config, data_dir, listeners=listeners)
    except Exception as exc:  # one readable line, never a traceback (details at DEBUG)
        log.debug("start-up failed", exc_info=True)
        print(f"strom serve: {describe_start_error(exc, data_dir)}", file=sys.stderr)
        return 1
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, broker.request_stop)
    try:
        await broker.start()
    except Exception as exc:  # one readable line, never a traceback (details at DEBUG)
        log.debug("start-up failed", exc_info=True)
        print(f"strom serve: {describe_start_error(exc, data_dir)}", file=sys.stderr)
        await broker.stop()
        return 1
    try:
        await broker.serve_forever()
    finally:
        log.info("shutting down")
        await broker.stop()
    return 0
