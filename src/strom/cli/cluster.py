"""``strom cluster info|health``: cluster id, controller, brokers; partition health."""

from __future__ import annotations

import argparse
from typing import Any

from strom.cli import cluster_config
from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import timeout, wait_for
from strom.cli.output import print_json, print_table


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``cluster`` and its subcommands."""
    cluster = subparsers.add_parser("cluster", help="cluster-wide information", parents=parents)
    sub = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
    p = sub.add_parser("info", help="cluster id, controller, brokers", parents=parents)
    add_client_options(p, listing=True)
    p.set_defaults(func=info)
    p = sub.add_parser(
        "health", help="offline / under-replicated partitions; exit 1 if unhealthy", parents=parents
    )
    add_client_options(p, listing=True)
    p.set_defaults(func=health)
    cluster_config.add_parser(sub, parents)


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
    brokers = sorted(
        ({"id": n.id, "host": n.host, "port": n.port, "rack": n.rack} for n in desc.nodes),
        key=lambda b: b["id"],
    )
    document = {
        "cluster_id": desc.cluster_id or md.cluster_id,
        "controller": controller,
        "brokers": brokers,
        "topics": len(md.topics),
    }
    if args.format == "json":
        print_json([document])
        return 0
    print(f"Cluster ID: {document['cluster_id']}")
    print(f"Controller: {controller}")
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


def health(args: argparse.Namespace) -> int:
    """Healthy when every partition has a leader and a full ISR (exit code 0, else 1)."""
    admin = admin_client(args, check=False)
    md = metadata(admin, args)
    offline: list[str] = []
    under: list[str] = []
    for name, topic in sorted(md.topics.items()):
        for pid, part in sorted(topic.partitions.items()):
            label = f"{name}-{pid}"
            if part.leader < 0:
                offline.append(label)
            elif len(part.isrs) < len(part.replicas):
                under.append(label)
    healthy = not offline and not under
    document = {
        "healthy": healthy,
        "brokers": sorted(md.brokers),
        "controller": md.controller_id,
        "offline_partitions": offline,
        "under_replicated_partitions": under,
    }
    if args.format == "json":
        print_json([document])
    else:
        print(f"Healthy: {'true' if healthy else 'false'}")
        print(f"Controller: {md.controller_id}")
        print(f"Brokers: {','.join(map(str, document['brokers']))}")
        print(f"Offline partitions: {','.join(offline)}")
        print(f"Under-replicated partitions: {','.join(under)}")
    return 0 if healthy else 1
