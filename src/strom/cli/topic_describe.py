"""``strom topic describe``: Kafka's describe lines, ``-p`` partition offsets, ``-c`` configs.

Default output is kafka-topics.sh's (scripts parse it; fields separated by tabs, partition
lines start with a tab)::

    Topic: t  TopicId: ...  PartitionCount: 2  ReplicationFactor: 1  Configs: retention.ms=1
        Topic: t  Partition: 0  Leader: 1  Replicas: 1  Isr: 1

``-p`` is a table per partition with its log start and end offsets, the number of messages
between them and the log's size in bytes on its leader (its segments' ``.log`` files, from
DescribeLogDirs sent to the leading broker, :mod:`strom.cli.log_dirs`; -1 when the partition
has no leader or its leader cannot be asked);
``-c`` lists every config of the topic with its value and source (``DYNAMIC_TOPIC_CONFIG``,
``STATIC_BROKER_CONFIG``, ``DEFAULT_CONFIG``). ``--format json`` prints a list of the rows.

``--under-replicated-partitions`` (ISR smaller than the replicas),
``--under-min-isr-partitions`` (ISR smaller than the topic's ``min.insync.replicas``) and
``--unavailable-partitions`` (no leader) print only the matching partition lines, without the
topic lines, as kafka-topics.sh does; without topic names they look at every topic.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import TopicCollection
from confluent_kafka.admin import ConfigResource, ConfigSource, OffsetSpec

from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import CliError, timeout, wait_for
from strom.cli.group_admin import end_offsets
from strom.cli.log_dirs import leader_partition_sizes
from strom.cli.output import print_json, print_table

PARTITION_HEADERS = (
    "TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "LOG-END-OFFSET",
    "MESSAGES", "SIZE",
)
CONFIG_HEADERS = ("TOPIC", "KEY", "VALUE", "SOURCE")
FILTERS = {
    "under-replicated-partitions": "only partitions whose ISR is smaller than their replicas",
    "under-min-isr-partitions": "only partitions whose ISR is below min.insync.replicas",
    "unavailable-partitions": "only partitions without a leader",
}


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``topic describe``."""
    p = sub.add_parser(
        "describe", help="partitions, replicas, offsets and configs of topics", parents=parents
    )
    p.add_argument(
        "names", nargs="*", metavar="NAME",
        help="topic(s) to describe (with a partition filter: default every topic)",
    )
    view = p.add_mutually_exclusive_group()
    view.add_argument(
        "--print-partitions", "-p", action="store_true",
        help="one row per partition with log start/end offsets and size in bytes",
    )
    view.add_argument(
        "--print-configs", "-c", action="store_true",
        help="every config of the topic, with its source",
    )
    for flag, text in FILTERS.items():
        p.add_argument(f"--{flag}", action="store_true", help=text)
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


def partition_rows(args: argparse.Namespace, admin: Any, docs: list[dict[str, Any]]) -> list[
    dict[str, Any]
]:
    keys = [(d["name"], p["partition"]) for d in docs for p in d["partitions"]]
    start = end_offsets(admin, keys, args.bootstrap_server, OffsetSpec.earliest())
    end = end_offsets(admin, keys, args.bootstrap_server, OffsetSpec.latest())
    sizes = leader_partition_sizes(metadata(admin, args), keys)
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


def min_isr(configs: list[dict[str, Any]], topic: str) -> int:
    """The topic's ``min.insync.replicas`` from its described configs (Kafka's default 1)."""
    for c in configs:
        if c["topic"] == topic and c["key"] == "min.insync.replicas" and c["value"] is not None:
            return int(c["value"])
    return 1


def partition_problems(partition: dict[str, Any], minimum: int) -> list[str]:
    """The filter names (``FILTERS`` keys) a partition matches; empty when it is healthy."""
    problems = []
    if partition["leader"] < 0:
        problems.append("unavailable-partitions")
    if len(partition["isr"]) < len(partition["replicas"]):
        problems.append("under-replicated-partitions")
    if len(partition["isr"]) < minimum:
        problems.append("under-min-isr-partitions")
    return problems


def _partition_line(topic: str, p: dict[str, Any]) -> str:
    return (
        f"\tTopic: {topic}\tPartition: {p['partition']}\tLeader: {p['leader']}\t"
        f"Replicas: {','.join(map(str, p['replicas']))}\t"
        f"Isr: {','.join(map(str, p['isr']))}"
    )


def _all_topics(args: argparse.Namespace, admin: Any) -> list[str]:
    return sorted(metadata(admin, args).topics)  # internal ones too, as kafka-topics.sh


def _describe_filtered(args: argparse.Namespace, admin: Any, wanted: list[str]) -> int:
    """Only the partition lines matching one of the ``wanted`` filters (kafka-topics.sh)."""
    if not args.names:
        args.names = _all_topics(args, admin)
    docs = topic_documents(args, admin)
    configs = []
    if "under-min-isr-partitions" in wanted:
        configs = [row for d in docs
                   for row in topic_configs(admin, d["name"], args.bootstrap_server)]  # fmt: skip
    rows = []
    for d in docs:
        minimum = min_isr(configs, d["name"])
        for p in d["partitions"]:
            if set(partition_problems(p, minimum)) & set(wanted):
                rows.append({"topic": d["name"], **p})
    if args.format == "json":
        print_json(rows)
    else:
        for row in rows:
            print(_partition_line(row["topic"], row))
    return 0


def describe(args: argparse.Namespace) -> int:
    """Kafka's describe format by default; ``-p`` partitions; ``-c`` configs."""
    wanted = [f for f in FILTERS if getattr(args, f.replace("-", "_"))]
    if not args.names and not wanted:
        raise CliError("give the topic(s) to describe (or a partition filter such as "
                       "--under-replicated-partitions, for every topic)")  # fmt: skip
    admin = admin_client(args)
    if wanted:
        if args.print_partitions or args.print_configs:
            raise CliError("partition filters go with the default view, not -p or -c")
        return _describe_filtered(args, admin, wanted)
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
            print(_partition_line(doc["name"], p))
    return 0
