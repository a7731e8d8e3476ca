"""``strom cluster config get|set|delete [--broker N | --default]``: dynamic broker configs.

Like ``kafka-configs.sh --entity-type brokers``: ``get`` describes a broker's configs (every
one, or those named) with value, source and whether it can change without a restart; with
``--default`` only the cluster-wide dynamic defaults. ``set name=value ...`` and ``delete name
...`` change a broker's own dynamic configs (``--broker N``, default: the broker answering) or
the cluster-wide default (``--default``) through IncrementalAlterConfigs; the broker applies
them at once. A refused change (a read-only config, a bad value) is one line on stderr.

librdkafka cannot name the cluster default (a BROKER resource named ``""``), so ``--default``
sends its two requests (DescribeConfigs, IncrementalAlterConfigs) with strom's own codec on one
plain connection to the first bootstrap server.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from strom.cli import wire
from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import CliError, wait_for
from strom.cli.output import print_json, print_table
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build, request_class

SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}  # fmt: skip
SET_OP, DELETE_OP = 0, 1
BROKER_TYPE = 4  # ConfigResource.Type.BROKER on the wire


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``config`` under ``strom cluster``."""
    config = sub.add_parser("config", help="dynamic broker configs", parents=parents)
    csub = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    p = csub.add_parser("get", help="describe broker configs", parents=parents)
    add_client_options(p, listing=True)
    _add_target(p)
    p.add_argument("names", nargs="*", metavar="NAME", help="configs to show (default: all)")
    p.set_defaults(func=get)
    p = csub.add_parser("set", help="set dynamic broker configs", parents=parents)
    add_client_options(p)
    _add_target(p)
    p.add_argument("pairs", nargs="+", metavar="NAME=VALUE")
    p.set_defaults(func=set_configs)
    p = csub.add_parser("delete", help="remove dynamic broker configs", parents=parents)
    add_client_options(p)
    _add_target(p)
    p.add_argument("names", nargs="+", metavar="NAME")
    p.set_defaults(func=delete_configs)


def _add_target(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--broker", type=int, metavar="N", help="this broker's own configs")
    group.add_argument(
        "--default", action="store_true", help="the cluster-wide default for every broker"
    )


def _resource(args: argparse.Namespace, admin: Any) -> ConfigResource:
    if args.default:
        return ConfigResource(ResourceType.BROKER, "")
    brokers = sorted(metadata(admin, args).brokers)
    if not brokers:
        raise CliError(f"no broker is known at {args.bootstrap_server}")
    broker = brokers[0] if args.broker is None else args.broker
    if broker not in brokers:  # the client would wait for a connection that never comes
        known = ", ".join(map(str, brokers))
        raise CliError(f"broker {broker} is not in the cluster (brokers: {known})")
    return ConfigResource(ResourceType.BROKER, str(broker))


def get(args: argparse.Namespace) -> int:
    if args.default:
        rows = _raw_describe_default(args)
    else:
        admin = admin_client(args)
        resource = _resource(args, admin)
        futures = admin.describe_configs([resource], request_timeout=10.0)
        configs = wait_for(futures[resource], "cannot describe the broker's configs",
                           args.bootstrap_server)  # fmt: skip
        rows = [
            {"name": c.name, "value": c.value, "source": _source_name(c.source),
             "dynamic": not c.is_read_only, "sensitive": c.is_sensitive}
            for c in configs.values()
        ]  # fmt: skip
    known = {r["name"] for r in rows}
    unknown = set(args.names) - known if not args.default else set()
    if unknown:
        raise CliError(f"unknown broker config: {', '.join(sorted(unknown))}")
    rows = sorted((r for r in rows if not args.names or r["name"] in args.names),
                  key=lambda r: r["name"])  # fmt: skip
    if args.format == "json":
        print_json(rows)
        return 0
    print_table(
        ("NAME", "VALUE", "SOURCE", "DYNAMIC"),
        [(r["name"], r["value"], r["source"], "yes" if r["dynamic"] else "no") for r in rows],
    )
    return 0


def _source_name(source: Any) -> str:
    code = int(getattr(source, "value", source))
    return SOURCES.get(code, str(code))


def _raw_call(args: argparse.Namespace, api_key: int, version: int, **fields: Any) -> Any:
    return wire.request(args.bootstrap_server, api_key, version, **fields)


def _check(code: int, message: str | None, what: str) -> None:
    if code != 0:
        name = ErrorCode(code).name.upper()
        raise CliError(f"{what}: {message or name} ({name})")


def _raw_describe_default(args: argparse.Namespace) -> list[dict[str, Any]]:
    mod = request_class(32, 4).__module__
    resource_cls = __import__(mod, fromlist=["x"]).DescribeConfigsResource
    resource = build(resource_cls, resource_type=BROKER_TYPE, resource_name="",
                     configuration_keys=None)  # fmt: skip
    response = _raw_call(args, 32, 4, resources=(resource,), include_synonyms=False,
                         include_documentation=False)  # fmt: skip
    [result] = response.results
    _check(result.error_code, result.error_message, "cannot describe the cluster default")
    return [
        {"name": c.name, "value": c.value, "source": _source_name(c.config_source),
         "dynamic": not c.read_only, "sensitive": c.is_sensitive}
        for c in result.configs
    ]  # fmt: skip


def _raw_alter_default(args: argparse.Namespace, ops: list[tuple[str, int, str | None]]) -> None:
    mod = __import__(request_class(44, 1).__module__, fromlist=["x"])
    configs = tuple(build(mod.AlterableConfig, name=n, config_operation=op, value=v)
                    for n, op, v in ops)  # fmt: skip
    resource = build(mod.AlterConfigsResource, resource_type=BROKER_TYPE,
                     resource_name="", configs=configs)  # fmt: skip
    response = _raw_call(args, 44, 1, resources=(resource,), validate_only=False)
    [result] = response.responses
    _check(result.error_code, result.error_message, "cannot alter the cluster default")


def _alter(args: argparse.Namespace, entries: list[ConfigEntry], verb: str) -> int:
    if args.default:
        ops = [(e.name, SET_OP if e.value is not None else DELETE_OP, e.value) for e in entries]
        _raw_alter_default(args, ops)
        print(f"{verb.capitalize()} {', '.join(n for n, _, _ in ops)} on the cluster default.")
        return 0
    admin = admin_client(args)
    resource = _resource(args, admin)
    for entry in entries:
        resource.add_incremental_config(entry)
    futures = admin.incremental_alter_configs([resource], request_timeout=10.0)
    target = "the cluster default" if args.default else f"broker {resource.name}"
    wait_for(futures[resource], f"cannot {verb} configs of {target}", args.bootstrap_server)
    names = ", ".join(e.name for e in entries)
    print(f"{verb.capitalize()} {names} on {target}.")
    return 0


def set_configs(args: argparse.Namespace) -> int:
    entries = []
    for pair in args.pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise CliError(f"expected NAME=VALUE, got {pair!r}")
        entries.append(
            ConfigEntry(name.strip(), value.strip(), incremental_operation=AlterConfigOpType.SET)
        )
    return _alter(args, entries, "set")


def delete_configs(args: argparse.Namespace) -> int:
    entries = [
        ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
        for name in args.names
    ]
    return _alter(args, entries, "delete")
