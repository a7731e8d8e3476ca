"""``strom cluster info|health`` (and the registration of every ``cluster`` subcommand).

``info``: cluster id, brokers (id, address, rack) and the controller from DescribeCluster, and
the controller's epoch. No Kafka client API carries the controller epoch (it lives in
ZooKeeper's ``/controller_epoch``), so ``info`` reads it, read-only, from ZooKeeper when
``--zookeeper CONNECT`` (or ``$STROM_ZOOKEEPER``) is given; without it, from the ZooKeeper
that ``strom cluster up`` recorded in ``<--data-dir>/cluster.json`` (default
``./strom-cluster``, as ``up``'s) when the described cluster is the one it started (a
recorded broker address among the brokers described; an unreachable recorded ZooKeeper is a
warning, not a failure); it shows ``-`` otherwise.

``health``: as rpk's: not healthy (exit code 1) while a partition has no leader, an ISR below
the topic's ``min.insync.replicas`` (what stops ``acks=all`` writes) or below its replicas
(under-replicated), or a broker named as a replica is not live. The text is a summary: a
count per kind, then per topic, with the internal topics folded into one line; ``--format
json`` lists every partition.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from strom.admin import cluster as admin_cluster
from strom.admin.errors import AdminError
from strom.cli import cluster_config, cluster_elect, cluster_local
from strom.cli.clients import session
from strom.cli.options import add_client_options
from strom.cli.output import print_json, print_table

ENV_ZOOKEEPER = "STROM_ZOOKEEPER"
#: partition ids shown per topic in the health summary (the JSON has them all)
SHOWN_IDS = 8


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``cluster`` and its subcommands."""
    parser = subparsers.add_parser(
        "cluster", parents=parents,
        help="cluster info and health, broker configs, leader elections, a local cluster "
             "(up, down, stop, start)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
    p = sub.add_parser("info", help="cluster id, controller and its epoch, brokers",
                       parents=parents)  # fmt: skip
    p.add_argument(
        "--zookeeper", metavar="CONNECT", default=os.environ.get(ENV_ZOOKEEPER),
        help=f"ZooKeeper to read the controller epoch from (default ${ENV_ZOOKEEPER}, else the "
             "one 'cluster up' recorded in --data-dir for this cluster)",
    )
    p.add_argument(
        "--data-dir", default=cluster_local.DEFAULT_DATA_DIR,
        help=f"the data dir given to 'cluster up' (default {cluster_local.DEFAULT_DATA_DIR})",
    )
    add_client_options(p, listing=True)
    p.set_defaults(func=info)
    p = sub.add_parser(
        "health", parents=parents,
        help="offline, under-min-ISR and under-replicated partitions, brokers down: exit 1 "
             "if any",
    )  # fmt: skip
    add_client_options(p, listing=True)
    p.set_defaults(func=health)
    cluster_config.add_parser(sub, parents)
    cluster_local.add_parser(sub, parents)
    cluster_elect.add_parser(sub, parents)


def _epoch(args: argparse.Namespace, addresses: set[str], timeout: float) -> int | None:
    """The controller epoch from ``--zookeeper``, else from the ZooKeeper ``cluster up``
    recorded for the brokers at ``addresses``; None when neither is known."""
    if args.zookeeper:
        return admin_cluster.controller_epoch(args.zookeeper, timeout)
    recorded = cluster_local.recorded_zookeeper(Path(args.data_dir).absolute(), addresses)
    if recorded is None:
        return None
    try:
        return admin_cluster.controller_epoch(recorded, timeout)
    except AdminError as exc:  # the record outlived its ZooKeeper: as without one
        print(f"warning: controller epoch unknown: {exc.message}", file=sys.stderr)
        return None


def info(args: argparse.Namespace) -> int:
    """Describe the cluster (DescribeCluster, with topic count from Metadata)."""
    s = session(args)
    desc = admin_cluster.describe_cluster(s)
    epoch = _epoch(args, desc.addresses(), s.timeout)
    document = {
        "cluster_id": desc.cluster_id,
        "controller": desc.controller,
        "controller_epoch": epoch,
        "brokers": [asdict(b) for b in desc.brokers],
        "topics": desc.topics,
    }
    if args.format == "json":
        print_json([document])
        return 0
    print(f"Cluster ID: {desc.cluster_id}")
    print(f"Controller: {desc.controller}")
    print(f"Controller epoch: {'-' if epoch is None else epoch}")
    print(f"Topics: {desc.topics}")
    print()
    print_table(
        ("ID", "HOST", "PORT", "RACK"),
        [(f"{b.id}*" if b.id == desc.controller else b.id, b.host, b.port, b.rack)
         for b in desc.brokers],
    )  # fmt: skip
    return 0


def _ids(ids: list[int]) -> str:
    shown = ",".join(map(str, sorted(ids)[:SHOWN_IDS]))
    return shown + (",…" if len(ids) > SHOWN_IDS else "")


def health_lines(report: admin_cluster.HealthReport) -> list[str]:
    """The text summary of ``report`` (see the module docstring)."""
    lines = [
        f"Healthy: {'true' if report.healthy else 'false'}",
    ]
    if not report.healthy:
        lines.append(f"Unhealthy reasons: {', '.join(report.reasons)}")
    lines += [
        f"Controller: {report.controller}",
        f"Brokers: {','.join(map(str, report.brokers))}",
    ]
    if report.brokers_down:
        lines.append(f"Brokers down: {','.join(map(str, report.brokers_down))}")
    for kind, name in admin_cluster.PROBLEM_KINDS.items():
        found = report.of_kind(kind)
        lines.append(f"{name[0].upper()}{name[1:]}: {len(found)}")
        for topic, ids in admin_cluster.fold_by_topic(found):
            if topic == "internal topics":
                lines.append(f"  {topic}: {len(ids)}")
            else:
                lines.append(f"  {topic}: {len(ids)} ({_ids(ids)})")
    return lines


def health(args: argparse.Namespace) -> int:
    """Healthy when every partition has a leader and all its replicas in sync, and every
    broker named as a replica is live."""
    report = admin_cluster.health(session(args))
    if args.format == "json":
        labels = {kind: [p.label for p in report.of_kind(kind)]
                  for kind in admin_cluster.PROBLEM_KINDS}  # fmt: skip
        print_json([{
            "healthy": report.healthy,
            "unhealthy_reasons": report.reasons,
            "brokers": report.brokers,
            "brokers_down": report.brokers_down,
            "controller": report.controller,
            "partitions": report.partitions,
            "offline_partitions": labels["offline"],
            "under_min_isr_partitions": labels["under_min_isr"],
            "under_replicated_partitions": labels["under_replicated"],
        }])  # fmt: skip
    else:
        for line in health_lines(report):
            print(line)
    return 0 if report.healthy else 1
