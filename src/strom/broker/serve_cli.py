"""``strom serve``: run one broker in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import sys
from pathlib import Path

from strom.config import BrokerConfig, ConfigError

log = logging.getLogger("strom")


def parse_host_port(text: str, flag: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{flag} expects HOST:PORT, got {text!r}")
    return (host or "0.0.0.0").strip("[]"), int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default="./strom-data", help="where logs and metadata live (default ./strom-data)")
    parser.add_argument("--listen", default="127.0.0.1:9092", help="HOST:PORT to listen on (default 127.0.0.1:9092)")
    parser.add_argument("--advertised-listener", help="HOST:PORT clients are told to connect to (default: --listen)")
    parser.add_argument("--config", type=Path, help="a properties file with Kafka broker property names")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one broker property (repeatable)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,  # the CLI entry point may have configured logging for client commands
    )
    try:
        config = BrokerConfig.load(args.config, args.set)
        listen = parse_host_port(args.listen, "--listen")
        advertised = (
            parse_host_port(args.advertised_listener, "--advertised-listener")
            if args.advertised_listener
            else (listen[0] if listen[0] not in ("0.0.0.0", "::") else "localhost", listen[1])
        )
    except ConfigError as exc:
        print(f"strom serve: {exc}", file=sys.stderr)
        return 2
    from strom.storage.file_handles import raise_nofile_limit

    before = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    nofile = raise_nofile_limit()  # segment files and sockets: as many as the OS lets us
    if nofile != before:
        log.info("raised the open-file limit from %d to %d", before, nofile)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        return asyncio.run(_serve(config, Path(args.data_dir), listen, advertised))
    except KeyboardInterrupt:
        return 0


async def _serve(
    config: BrokerConfig, data_dir: Path, listen: tuple[str, int], advertised: tuple[str, int]
) -> int:
    from strom.broker.broker import Broker

    broker = Broker(config, data_dir, listen, advertised)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, broker.request_stop)
    try:
        await broker.start()
    except Exception as exc:  # one readable line, never a traceback (details at DEBUG)
        log.debug("start-up failed", exc_info=True)
        print(f"strom serve: {exc}", file=sys.stderr)
        await broker.stop()
        return 1
    try:
        await broker.serve_forever()
    finally:
        log.info("shutting down")
        await broker.stop()
    return 0
