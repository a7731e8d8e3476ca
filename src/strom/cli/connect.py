"""``strom connect standalone WORKER.properties [CONNECTOR.properties|.json ...]`` and
``strom connect distributed WORKER.properties``.

Runs a Connect worker in this process (see :mod:`strom.connect.standalone` and
:mod:`strom.connect.distributed_worker`). The runtime and its web stack are imported only when
the command runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from pathlib import Path
from typing import Any

from strom.cli.errors import CliError


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("connect", help="run a Connect worker", parents=parents)
    sub = p.add_subparsers(dest="mode", metavar="MODE", required=True)
    s = sub.add_parser("standalone", help="a standalone worker (offsets in a local file)",
                       parents=parents)
    s.add_argument("worker", type=Path, help="worker .properties file")
    s.add_argument("connectors", type=Path, nargs="*",
                   help="connector configurations (.properties or .json)")
    s.set_defaults(func=run)
    d = sub.add_parser("distributed", parents=parents,
                       help="a worker of a Connect cluster (configs, offsets and statuses in "
                            "compacted topics; work shared through a group)")
    d.add_argument("worker", type=Path, help="worker .properties file")
    d.set_defaults(func=run, connectors=[])


def run(args: argparse.Namespace) -> int:
    # The web stack is imported late, inside the worker: look for it first so a plain
    # `pip install strom` gets this line instead of an import error half-way through start-up.
    missing = [name for name in ("starlette", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise CliError(f"strom Connect needs the 'connect' extra (pip install "
                       f"'strom[connect]'): {', '.join(missing)} not installed")
    try:
        from strom.connect import distributed_worker, standalone  # the web stack: only to run
    except ImportError as exc:
        raise CliError(f"strom Connect needs the 'connect' extra (pip install "
                       f"'strom[connect]'): {exc}") from None
    logging.getLogger("strom.connect").setLevel(logging.INFO)
    for path in [args.worker, *args.connectors]:
        if not path.is_file():
            raise CliError(f"no such file: {path}")
    try:
        if args.mode == "distributed":
            return distributed_worker.run_distributed(args.worker)
        return standalone.run_standalone(args.worker, list(args.connectors))
    except (standalone.WorkerConfigError, ValueError, OSError) as exc:
        raise CliError(" ".join(str(exc).split("\n"))) from None
