"""``strom connector ...``: manage connectors through a Connect worker's REST API.

``--format json`` prints one JSON list, as every ``strom`` command: the REST document of a
single object wrapped in a list. ``list``, ``status NAME``, ``create -f FILE.json``,
``config NAME``, ``pause``, ``resume``, ``restart [--include-tasks] [--only-failed]``,
``delete``, ``plugins``; ``--connect-url`` (alias ``--url``; default
``http://127.0.0.1:8083``, the name ``strom console`` uses too), ``--format text|json``. An
error from the worker is its ``message`` on one line; an unreachable worker is one line too
(:class:`strom.admin.connect.ConnectRest`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from strom.admin.connect import DEFAULT_URL, ConnectRest
from strom.cli.errors import CliError
from strom.cli.options import add_format_option
from strom.cli.output import print_json, print_table


def add_url_option(parser: argparse.ArgumentParser, default: str | None = DEFAULT_URL,
                   help_text: str | None = None) -> None:  # fmt: skip
    """``--connect-url`` (alias ``--url``): the one name of a Connect worker's REST URL."""
    parser.add_argument(
        "--connect-url", "--url", dest="connect_url", default=default, metavar="URL",
        help=help_text or f"Connect worker REST URL (default {DEFAULT_URL})",
    )  # fmt: skip


def rest(args: argparse.Namespace) -> ConnectRest:
    return ConnectRest(args.connect_url)


def _name(args: argparse.Namespace) -> str:
    return ConnectRest.path(args.name)


def cmd_list(args: argparse.Namespace) -> int:
    doc = rest(args).request("GET", "/connectors?expand=status")
    if args.format == "json":
        print_json([{"name": name, "type": e["status"].get("type"),
                     "state": e["status"]["connector"]["state"],
                     "tasks": [{"id": t["id"], "state": t["state"]}
                               for t in e["status"]["tasks"]]}
                    for name, e in sorted(doc.items())])
        return 0
    rows = []
    for name, entry in sorted(doc.items()):
        st = entry["status"]
        tasks = ",".join(f"{t['id']}:{t['state']}" for t in st["tasks"]) or "-"
        rows.append([name, st.get("type"), st["connector"]["state"], tasks])
    print_table(["NAME", "TYPE", "STATE", "TASKS"], rows, flexible=("TASKS",))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    doc = rest(args).request("GET", f"{_name(args)}/status")
    if args.format == "json":
        print_json([doc])
        return 0
    rows = [["connector", "-", doc["connector"]["state"], doc["connector"]["worker_id"]]]
    rows += [["task", t["id"], t["state"], t["worker_id"]] for t in doc["tasks"]]
    print_table(["KIND", "ID", "STATE", "WORKER"], rows, flexible=("WORKER",))
    for part in [doc["connector"], *doc["tasks"]]:
        if part.get("trace"):
            print(part["trace"].strip().splitlines()[-1])
    return 0


def cmd_create(args: argparse.Namespace) -> int:
    try:
        doc = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {args.file}: {exc}") from None
    if not isinstance(doc, dict):
        raise CliError(f"{args.file}: expected a JSON object")
    if "config" not in doc:
        doc = {"name": doc.get("name"), "config": doc}
    info = rest(args).request("POST", "/connectors", doc)
    if args.format == "json":
        print_json([info])
    elif info.get("tasks"):
        print(f"Created connector {info['name']} ({len(info['tasks'])} task(s))")
    else:  # a Connect cluster's leader assigns the tasks a moment later
        print(f"Created connector {info['name']} (tasks being started: see "
              f"'strom connector status {info['name']}')")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    doc = rest(args).request("GET", f"{_name(args)}/config")
    if args.format == "json":
        print_json([doc])
    else:
        for key in sorted(doc):
            print(f"{key}={doc[key]}")
    return 0


def _action(method: str, suffix: str, verb: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        path = f"{_name(args)}{suffix}"
        if suffix == "/restart":
            path += (f"?includeTasks={str(args.include_tasks).lower()}"
                     f"&onlyFailed={str(args.only_failed).lower()}")
        doc = rest(args).request(method, path)
        if args.format == "json":
            print_json([doc if doc is not None else {"name": args.name, "result": verb}])
        else:
            print(f"{verb.capitalize()} connector {args.name}")
        return 0

    return run


def cmd_plugins(args: argparse.Namespace) -> int:
    doc = rest(args).request("GET", "/connector-plugins")
    if args.format == "json":
        print_json(doc)
    else:
        print_table(["CLASS", "TYPE", "VERSION"],
                    [[p["class"], p["type"], p["version"]] for p in doc])
    return 0


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``connector``; ``parents`` carry no broker options (a worker is no broker)."""
    p = subparsers.add_parser("connector", help="manage connectors on a Connect worker",
                              parents=parents)
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    def command(name: str, func: Any, help_text: str, named: bool = True) -> Any:
        c = sub.add_parser(name, help=help_text, parents=parents)
        add_url_option(c)
        add_format_option(c)
        if named:
            c.add_argument("name", help="connector name")
        c.set_defaults(func=func)
        return c

    command("list", cmd_list, "list connectors and their states", named=False)
    command("status", cmd_status, "a connector's and its tasks' states")
    create = command("create", cmd_create, "create a connector from a JSON file", named=False)
    create.add_argument("-f", "--file", required=True, help="JSON: {name, config} or config")
    command("config", cmd_config, "a connector's configuration")
    command("pause", _action("PUT", "/pause", "paused"), "pause a connector")
    command("resume", _action("PUT", "/resume", "resumed"), "resume a connector")
    restart = command("restart", _action("POST", "/restart", "restarted"), "restart")
    restart.add_argument("--include-tasks", action="store_true", help="restart tasks too")
    restart.add_argument("--only-failed", action="store_true", help="only FAILED instances")
    command("delete", _action("DELETE", "", "deleted"), "delete a connector")
    command("plugins", cmd_plugins, "installed connector plugins", named=False)
