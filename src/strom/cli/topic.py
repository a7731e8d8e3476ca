"""``strom topic create|list|describe|alter-config|delete``."""

from __future__ import annotations

import argparse
import re
from typing import Any

from confluent_kafka import TopicCollection
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import CliError, timeout, wait_for
from strom.cli.output import print_json

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``topic`` and its subcommands."""
    topic = subparsers.add_parser(
        "topic", help="create, list, describe, configure, delete topics", parents=parents
    )
    sub = topic.add_subparsers(dest="topic_command", metavar="COMMAND", required=True)

    p = sub.add_parser("create", help="create a topic", parents=parents)
    p.add_argument("name", metavar="NAME")
    p.add_argument("--partitions", "-p", type=int, required=True, metavar="N")
    p.add_argument(
        "--replication-factor",
        "-r",
        type=int,
        default=-1,
        metavar="R",
        help="replicas per partition (default: the broker's default)",
    )
    p.add_argument(
        "--config",
        "-c",
        action="append",
        default=[],
        metavar="K=V",
        help="topic config, repeatable",
    )
    add_client_options(p)
    p.set_defaults(func=create)

    p = sub.add_parser("list", help="list topics", parents=parents)
    add_client_options(p, listing=True)
    p.set_defaults(func=list_)

    p = sub.add_parser(
        "describe", help="partitions, replicas and configs of topics", parents=parents
    )
    p.add_argument("names", nargs="+", metavar="NAME")
    add_client_options(p, listing=True)
    p.set_defaults(func=describe)

    p = sub.add_parser("alter-config", help="set or delete topic configs", parents=parents)
    p.add_argument("name", metavar="NAME")
    p.add_argument("settings", nargs="*", metavar="K=V")
    p.add_argument(
        "--delete",
        "-d",
        action="append",
        default=[],
        metavar="K",
        help="config to remove (back to the default), repeatable",
    )
    add_client_options(p)
    p.set_defaults(func=alter_config)

    p = sub.add_parser("delete", help="delete topics", parents=parents)
    p.add_argument("names", nargs="+", metavar="NAME")
    add_client_options(p)
    p.set_defaults(func=delete)


def validate_topic_name(name: str) -> None:
    """Kafka's rule for legal topic names, checked before asking the broker."""
    if not name or name in (".", ".."):
        raise CliError(f"invalid topic name {name!r}: must not be empty, '.' or '..'")
    if len(name) > MAX_NAME_LENGTH:
        raise CliError(f"invalid topic name: longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL_NAME.match(name):
        raise CliError(
            f"invalid topic name {name!r}: only ASCII letters, digits, '.', '_' and '-' allowed"
        )


def parse_settings(items: list[str], what: str = "config") -> dict[str, str]:
    """``k=v`` strings to a dict; a missing ``=`` is a :class:`CliError`."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"invalid {what} {item!r}: expected KEY=VALUE")
        result[key] = value
    return result


def create(args: argparse.Namespace) -> int:
    """Create one topic."""
    validate_topic_name(args.name)
    if args.partitions < 1:
        raise CliError("--partitions must be at least 1")
    configs = parse_settings(args.config)
    admin = admin_client(args)
    new = NewTopic(
        args.name,
        num_partitions=args.partitions,
        replication_factor=args.replication_factor,
        config=configs,
    )
    futures = admin.create_topics([new], request_timeout=timeout())
    wait_for(futures[args.name], f"cannot create topic {args.name!r}", args.bootstrap_server)
    print(f"Created topic {args.name}.")
    return 0


def list_(args: argparse.Namespace) -> int:
    """List topic names (text) or names with partition counts (json)."""
    admin = admin_client(args, check=False)
    topics = metadata(admin, args).topics
    names = sorted(topics)
    if args.format == "json":
        print_json([{"name": n, "partitions": len(topics[n].partitions)} for n in names])
    else:
        for name in names:
            print(name)
    return 0


def _kafka_uuid(topic_id: Any) -> str:
    """Kafka prints topic ids as URL-safe base64 without padding."""
    if topic_id is None:
        return "-"
    return str(topic_id).replace("+", "-").replace("/", "_").rstrip("=")


def _non_default_configs(admin: Any, name: str, bootstrap: str) -> dict[str, str]:
    """The topic's configs that differ from the defaults (like kafka-topics.sh)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    futures = admin.describe_configs([resource], request_timeout=timeout())
    entries = wait_for(futures[resource], f"cannot describe configs of {name!r}", bootstrap)
    return {
        key: entry.value
        for key, entry in sorted(entries.items())
        if not entry.is_default and entry.value is not None
    }


def describe(args: argparse.Namespace) -> int:
    """Kafka's describe format: a header line per topic, then one line per partition."""
    admin = admin_client(args)
    futures = admin.describe_topics(TopicCollection(args.names), request_timeout=timeout())
    documents = []
    for name in args.names:
        desc = wait_for(futures[name], f"cannot describe topic {name!r}", args.bootstrap_server)
        configs = _non_default_configs(admin, name, args.bootstrap_server)
        parts = sorted(desc.partitions, key=lambda p: p.id)
        rf = len(parts[0].replicas) if parts else 0
        documents.append(
            {
                "name": name,
                "topic_id": _kafka_uuid(desc.topic_id),
                "partition_count": len(parts),
                "replication_factor": rf,
                "configs": configs,
                "partitions": [
                    {
                        "partition": p.id,
                        "leader": p.leader.id if p.leader is not None else -1,
                        "replicas": [n.id for n in p.replicas],
                        "isr": [n.id for n in p.isr],
                    }
                    for p in parts
                ],
            }
        )
    if args.format == "json":
        print_json(documents if len(documents) > 1 else documents[0])
        return 0
    for doc in documents:
        cfg = ",".join(f"{k}={v}" for k, v in doc["configs"].items())
        print(
            f"Topic: {doc['name']}\tTopicId: {doc['topic_id']}\t"
            f"PartitionCount: {doc['partition_count']}\t"
            f"ReplicationFactor: {doc['replication_factor']}\tConfigs: {cfg}"
        )
        for p in doc["partitions"]:
            print(
                f"\tTopic: {doc['name']}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
                f"Replicas: {','.join(map(str, p['replicas']))}\t"
                f"Isr: {','.join(map(str, p['isr']))}"
            )
    return 0


def alter_config(args: argparse.Namespace) -> int:
    """Incrementally set and delete topic configs."""
    settings = parse_settings(args.settings)
    if not settings and not args.delete:
        raise CliError("nothing to change: give K=V settings and/or --delete K")
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()
    ] + [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in args.delete]
    resource = ConfigResource(ConfigResource.Type.TOPIC, args.name, incremental_configs=entries)
    admin = admin_client(args)
    futures = admin.incremental_alter_configs([resource], request_timeout=timeout())
    for future in futures.values():
        wait_for(future, f"cannot alter configs of {args.name!r}", args.bootstrap_server)
    print(f"Completed updating config for topic {args.name}.")
    return 0


def delete(args: argparse.Namespace) -> int:
    """Delete topics."""
    admin = admin_client(args)
    futures = admin.delete_topics(args.names, request_timeout=timeout())
    for name in args.names:
        wait_for(futures[name], f"cannot delete topic {name!r}", args.bootstrap_server)
        print(f"Deleted topic {name}.")
    return 0
