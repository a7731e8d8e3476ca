"""``strom topic describe``: Kafka's describe lines, ``-p`` partition offsets, ``-c`` configs.

Default output is kafka-topics.sh's (scripts parse it; fields separated by tabs, partition
lines start with a tab)::

    Topic: t  TopicId: ...  PartitionCount: 2  ReplicationFactor: 1  Configs: retention.ms=1
        Topic: t  Partition: 0  Leader: 1  Replicas: 1  Isr: 1

``-p`` is a table per partition with its log start and end offsets, the number of messages
between them and the log's size in bytes on its leader (its segments' ``.log`` files, from
DescribeLogDirs sent to the leading broker, :mod:`strom.admin.log_dirs`; -1 when the partition
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
from dataclasses import asdict
from typing import Any

from strom.admin import topics
from strom.admin.topics import PROBLEMS as FILTERS
from strom.admin.topics import PartitionState
from strom.cli.clients import checked_session
from strom.cli.errors import CliError
from strom.cli.options import add_client_options
from strom.cli.output import print_json, print_table

PARTITION_HEADERS = (
    "TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "LOG-END-OFFSET",
    "MESSAGES", "SIZE",
)
CONFIG_HEADERS = ("TOPIC", "KEY", "VALUE", "SOURCE")


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


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def _partition_line(topic: str, p: PartitionState) -> str:
    return (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {p.leader}\t"
        f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
    )


def describe(args: argparse.Namespace) -> int:
    """Kafka's describe format by default; ``-p`` partitions; ``-c`` configs."""
    wanted = [f for f in FILTERS if getattr(args, f.replace("-", "_"))]
    if not args.names and not wanted:
        raise CliError("give the topic(s) to describe (or a partition filter such as "
                       "--under-replicated-partitions, for every topic)")  # fmt: skip
    s = checked_session(args)
    if wanted:
        if args.print_partitions or args.print_configs:
            raise CliError("partition filters go with the default view, not -p or -c")
        names = args.names or topics.all_topic_names(s)  # internal ones too, as kafka-topics.sh
        found = topics.problem_partitions(s, names, wanted)
        if args.format == "json":
            print_json([{"topic": name, **asdict(p)} for name, p in found])
        else:
            for name, p in found:
                print(_partition_line(name, p))
        return 0
    docs = topics.describe_topics(s, args.names)
    if args.print_partitions:
        rows = topics.partition_offsets(s, docs)
        if args.format == "json":
            print_json([asdict(r) for r in rows])
        else:
            print_table(PARTITION_HEADERS, [
                [r.topic, r.partition, r.leader, _ids(r.replicas), _ids(r.isr),
                 r.log_start_offset, r.log_end_offset, r.messages, r.size]
                for r in rows
            ])  # fmt: skip
        return 0
    configs = [row for d in docs for row in topics.topic_configs(s, d.name)]
    if args.print_configs:
        if args.format == "json":
            print_json([asdict(c) for c in configs])
        else:
            print_table(CONFIG_HEADERS, [(c.topic, c.key, c.value, c.source) for c in configs],
                        flexible=("VALUE",))
        return 0
    overrides = {d.name: topics.overrides([c for c in configs if c.topic == d.name])
                 for d in docs}  # fmt: skip
    if args.format == "json":
        print_json([{**asdict(d), "configs": overrides[d.name]} for d in docs])
        return 0
    for doc in docs:
        cfg = ",".join(f"{k}={v}" for k, v in overrides[doc.name].items())
        print(
            f"Topic: {doc.name}\tTopicId: {doc.topic_id}\t"
            f"PartitionCount: {doc.partition_count}\t"
            f"ReplicationFactor: {doc.replication_factor}\tConfigs: {cfg}"
        )
        for p in doc.partitions:
            print(_partition_line(doc.name, p))
    return 0
