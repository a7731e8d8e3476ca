"""``strom cluster info|health`` (and the registration of every ``cluster`` subcommand).

``info``: cluster id, brokers (id, address, rack) and the controller from DescribeCluster, and
the controller's epoch. No Kafka client API carries the controller epoch (it lives in
ZooKeeper's ``/controller_epoch``, as kafka-zookeeper tools read it), so ``info`` reads it,
read-only, from ZooKeeper when ``--zookeeper CONNECT`` (or ``$STROM_ZOOKEEPER``) is given;
without it, from the ZooKeeper that ``strom cluster up`` recorded in ``<--data-dir>/cluster.json``
(default ``./strom-cluster``, as ``up``'s) when the described cluster is the one it started
(a recorded broker address among the brokers described; an unreachable recorded ZooKeeper is a
warning, not a failure); it shows ``-`` otherwise.

``health``: exit code 1 while a partition has no leader or its ISR is below the topic's
``min.insync.replicas`` (what stops ``acks=all`` writes), one line per problem;
under-replicated partitions (ISR smaller than the replicas, at or above min ISR) are listed as
warnings and do not fail it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from confluent_kafka.admin import ConfigResource

from strom.cli import cluster_config, cluster_elect, cluster_local
from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import CliError, timeout, wait_for
from strom.cli.output import print_json, print_table

ENV_ZOOKEEPER = "STROM_ZOOKEEPER"


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``cluster`` and its subcommands."""
    cluster = subparsers.add_parser("cluster", help="cluster-wide information", parents=parents)
    sub = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
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
        "health", help="partitions without a leader or under min ISR: exit 1 if any",
        parents=parents,
    )
    add_client_options(p, listing=True)
    p.set_defaults(func=health)
    cluster_config.add_parser(sub, parents)
    cluster_local.add_parser(sub, parents)
    cluster_elect.add_parser(sub, parents)


def controller_epoch(connect: str) -> int | None:
    """``/controller_epoch`` read from ZooKeeper (None if no controller was ever elected)."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError

    from strom.metadata.zk_model import CONTROLLER_EPOCH_PATH, controller_epoch_from_bytes

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries are not the user's
    zk = KazooClient(hosts=connect, timeout=timeout(), read_only=True)
    try:
        zk.start(timeout=timeout())
    except KazooTimeoutError:
        zk.close()
        raise CliError(f"cannot reach ZooKeeper at {connect} within {timeout():g} s") from None
    try:
        data, _stat = zk.get(CONTROLLER_EPOCH_PATH)
        return controller_epoch_from_bytes(data)
    except NoNodeError:
        return None
    finally:
        zk.stop()
        zk.close()


def _epoch(args: argparse.Namespace, addresses: set[str]) -> int | None:
    """The controller epoch from ``--zookeeper``, else from the ZooKeeper ``cluster up``
    recorded for the brokers at ``addresses``; None when neither is known."""
    if args.zookeeper:
        return controller_epoch(args.zookeeper)
    recorded = cluster_local.recorded_zookeeper(Path(args.data_dir).absolute(), addresses)
    if recorded is None:
        return None
    try:
        return controller_epoch(recorded)
    except CliError as exc:  # the record outlived its ZooKeeper: as without one
        print(f"warning: controller epoch unknown: {exc}", file=sys.stderr)
        return None


def info(args: argparse.Namespace) -> int:
    """Describe the cluster (DescribeCluster, with topic count from Metadata)."""
    admin = admin_client(args, check=False)
    md = metadata(admin, args)
    desc = wait_for(
        admin.describe_cluster(request_timeout=timeout()),
        "cannot describe the cluster",
        args.bootstrap_server,
    )
    controller = desc.controller.id if desc.controller is not None else md.controller_id
    epoch = _epoch(args, {f"{n.host}:{n.port}" for n in desc.nodes})
    brokers = sorted(
        ({"id": n.id, "host": n.host, "port": n.port, "rack": n.rack} for n in desc.nodes),
        key=lambda b: b["id"],
    )
    document = {
        "cluster_id": desc.cluster_id or md.cluster_id,
        "controller": controller,
        "controller_epoch": epoch,
        "brokers": brokers,
        "topics": len(md.topics),
    }
    if args.format == "json":
        print_json([document])
        return 0
    print(f"Cluster ID: {document['cluster_id']}")
    print(f"Controller: {controller}")
    print(f"Controller epoch: {'-' if epoch is None else epoch}")
    print(f"Topics: {document['topics']}")
    print()
    print_table(
        ("ID", "HOST", "PORT", "RACK"),
        [
            (f"{b['id']}*" if b["id"] == controller else b["id"], b["host"], b["port"], b["rack"])
            for b in brokers
        ],
    )
    return 0


def min_insync_replicas(admin: Any, topics: list[str]) -> dict[str, int]:
    """Each topic's ``min.insync.replicas`` (one DescribeConfigs; 1 where unknown)."""
    result = dict.fromkeys(topics, 1)
    if not topics:
        return result
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    futures = admin.describe_configs(resources, request_timeout=timeout())
    for resource, future in futures.items():
        try:
            entry = future.result(timeout=timeout() + 1).get("min.insync.replicas")
        except Exception:  # noqa: BLE001 - a topic deleted meanwhile: nothing to check
            continue
        if entry is not None and entry.value is not None:
            result[resource.name] = int(entry.value)
    return result


def health(args: argparse.Namespace) -> int:
    """Healthy when every partition has a leader and an ISR of at least min.insync.replicas."""
    admin = admin_client(args, check=False)
    md = metadata(admin, args)
    minimum = min_insync_replicas(admin, sorted(md.topics))
    offline: list[str] = []
    under_min: list[str] = []
    under: list[str] = []
    problems: list[str] = []
    for name, topic in sorted(md.topics.items()):
        for pid, part in sorted(topic.partitions.items()):
            label = f"{name}-{pid}"
            state = (f"Leader: {part.leader} Replicas: {','.join(map(str, part.replicas))} "
                     f"Isr: {','.join(map(str, part.isrs))}")  # fmt: skip
            if part.leader < 0:
                offline.append(label)
                problems.append(f"Problem: {label} has no leader ({state})")
            if len(part.isrs) < minimum[name]:
                under_min.append(label)
                problems.append(f"Problem: {label} is under min ISR: {len(part.isrs)} in sync, "
                                f"min.insync.replicas={minimum[name]} ({state})")  # fmt: skip
            elif len(part.isrs) < len(part.replicas):
                under.append(label)
                problems.append(f"Warning: {label} is under-replicated ({state})")
    healthy = not offline and not under_min
    document = {
        "healthy": healthy,
        "brokers": sorted(md.brokers),
        "controller": md.controller_id,
        "offline_partitions": offline,
        "under_min_isr_partitions": under_min,
        "under_replicated_partitions": under,
    }
    if args.format == "json":
        print_json([document])
    else:
        print(f"Healthy: {'true' if healthy else 'false'}")
        print(f"Controller: {md.controller_id}")
        print(f"Brokers: {','.join(map(str, document['brokers']))}")
        print(f"Offline partitions: {','.join(offline)}")
        print(f"Under-min-ISR partitions: {','.join(under_min)}")
        print(f"Under-replicated partitions: {','.join(under)}")
        for line in problems:
            print(line)
    return 0 if healthy else 1
