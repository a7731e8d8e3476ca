"""``strom topic describe``: Kafka's describe lines, ``-p`` partition offsets, ``-c`` configs.

Default output is kafka-topics.sh's (scripts parse it; fields separated by tabs, partition
lines start with a tab)::

    Topic: t  TopicId: ...  PartitionCount: 2  ReplicationFactor: 1  Configs: retention.ms=1
        Topic: t  Partition: 0  Leader: 1  Replicas: 1  Isr: 1

``-p`` is a table per partition with its log start and end offsets, the number of messages
between them and the log's size in bytes (its segments' ``.log`` files, from DescribeLogDirs,
which the client library does not offer: sent with :mod:`strom.cli.wire`; -1 when the broker
hosts no log of the partition);
``-c`` lists every config of the topic with its value and source (``DYNAMIC_TOPIC_CONFIG``,
``STATIC_BROKER_CONFIG``, ``DEFAULT_CONFIG``). ``--format json`` prints a list of the rows.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import TopicCollection
from confluent_kafka.admin import ConfigResource, ConfigSource, OffsetSpec

from strom.cli import wire
from strom.cli.clients import add_client_options, admin_client
from strom.cli.errors import timeout, wait_for
from strom.cli.group_admin import end_offsets
from strom.cli.output import print_json, print_table

PARTITION_HEADERS = (
    "TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "LOG-END-OFFSET",
    "MESSAGES", "SIZE",
)
DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION = 35, 4
CONFIG_HEADERS = ("TOPIC", "KEY", "VALUE", "SOURCE")


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``topic describe``."""
    p = sub.add_parser(
        "describe", help="partitions, replicas, offsets and configs of topics", parents=parents
    )
    p.add_argument("names", nargs="+", metavar="NAME", help="topic(s) to describe")
    view = p.add_mutually_exclusive_group()
    view.add_argument(
        "--print-partitions", "-p", action="store_true",
        help="one row per partition with log start/end offsets and size in bytes",
    )
    view.add_argument(
        "--print-configs", "-c", action="store_true",
        help="every config of the topic, with its source",
    )
    add_client_options(p, listing=True)
    p.set_defaults(func=describe)


def _kafka_uuid(topic_id: Any) -> str:
    """Kafka prints topic ids as URL-safe base64 without padding."""
    if topic_id is None:
        return "-"
    return str(topic_id).replace("+", "-").replace("/", "_").rstrip("=")


def _source_name(source: Any) -> str:
    """Kafka's name of a config source (the client hands out the enum or its number)."""
    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


def topic_configs(admin: Any, name: str, bootstrap: str) -> list[dict[str, Any]]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    futures = admin.describe_configs([resource], request_timeout=timeout())
    entries = wait_for(futures[resource], f"cannot describe configs of {name!r}", bootstrap)
    return [
        {
            "topic": name,
            "key": key,
            "value": None if entry.is_sensitive else entry.value,
            "source": _source_name(entry.source),
            "is_default": bool(entry.is_default),
            "read_only": bool(entry.is_read_only),
        }
        for key, entry in sorted(entries.items())
    ]


def topic_documents(args: argparse.Namespace, admin: Any) -> list[dict[str, Any]]:
    futures = admin.describe_topics(TopicCollection(args.names), request_timeout=timeout())
    documents = []
    for name in args.names:
        desc = wait_for(futures[name], f"cannot describe topic {name!r}", args.bootstrap_server)
        parts = sorted(desc.partitions, key=lambda p: p.id)
        documents.append(
            {
                "name": name,
                "topic_id": _kafka_uuid(desc.topic_id),
                "internal": bool(getattr(desc, "is_internal", False)),
                "partition_count": len(parts),
                "replication_factor": len(parts[0].replicas) if parts else 0,
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
    return documents


def partition_sizes(bootstrap: str, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Bytes of each partition's log on the (first bootstrap) broker, summed over its dirs."""
    wanted: dict[str, list[int]] = {}
    for name, index in keys:
        wanted.setdefault(name, []).append(index)
    topics = tuple(wire.part(DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, "DescribableLogDirTopic",
                             topic=name, partitions=tuple(parts))
                   for name, parts in wanted.items())  # fmt: skip
    resp = wire.request(bootstrap, DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, topics=topics)
    wire.check(resp.error_code, "cannot describe log dirs")
    sizes: dict[tuple[str, int], int] = {}
    for result in resp.results:
        if int(result.error_code) != 0:
            continue  # an offline log dir: its partitions have no size here
        for t in result.topics:
            for p in t.partitions:
                key = (t.name, int(p.partition_index))
                sizes[key] = sizes.get(key, 0) + int(p.partition_size)
    return sizes


def partition_rows(args: argparse.Namespace, admin: Any, docs: list[dict[str, Any]]) -> list[
    dict[str, Any]
]:
    keys = [(d["name"], p["partition"]) for d in docs for p in d["partitions"]]
    start = end_offsets(admin, keys, args.bootstrap_server, OffsetSpec.earliest())
    end = end_offsets(admin, keys, args.bootstrap_server, OffsetSpec.latest())
    sizes = partition_sizes(args.bootstrap_server, keys)
    rows = []
    for d in docs:
        for p in d["partitions"]:
            key = (d["name"], p["partition"])
            rows.append(
                {
                    "topic": d["name"],
                    "partition": p["partition"],
                    "leader": p["leader"],
                    "replicas": p["replicas"],
                    "isr": p["isr"],
                    "log_start_offset": start[key],
                    "log_end_offset": end[key],
                    "messages": end[key] - start[key],
                    "size": sizes.get(key, -1),
                }
            )
    return rows


def describe(args: argparse.Namespace) -> int:
    """Kafka's describe format by default; ``-p`` partitions; ``-c`` configs."""
    admin = admin_client(args)
    docs = topic_documents(args, admin)
    if args.print_partitions:
        rows = partition_rows(args, admin, docs)
        if args.format == "json":
            print_json(rows)
        else:
            print_table(
                PARTITION_HEADERS,
                [
                    [*list(r.values())[:3], ",".join(map(str, r["replicas"])),
                     ",".join(map(str, r["isr"])), *list(r.values())[5:]]
                    for r in rows
                ],
            )
        return 0
    configs = [row for d in docs for row in topic_configs(admin, d["name"], args.bootstrap_server)]
    if args.print_configs:
        if args.format == "json":
            print_json(configs)
        else:
            print_table(CONFIG_HEADERS, [(c["topic"], c["key"], c["value"], c["source"])
                                         for c in configs])
        return 0
    for d in docs:
        d["configs"] = {
            c["key"]: c["value"]
            for c in configs
            if c["topic"] == d["name"] and not c["is_default"] and c["value"] is not None
        }
    if args.format == "json":
        print_json(docs)
        return 0
    for doc in docs:
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
